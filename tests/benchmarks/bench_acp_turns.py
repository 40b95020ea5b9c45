"""Turns per second through the ACP path vs the exec path, with trivial agents (issue 29), and
the process's RSS over 1,000 ACP turns.

    python -m tests.benchmarks.bench_acp_turns              # 200 turns each, then 1,000 ACP turns
    python -m tests.benchmarks.bench_acp_turns --turns 50 --long 300

Both paths run `host.runtime.run_turn` on one session of a SQLite board, each turn kept as
transcript items. The exec agent is `python -c` reading its prompt and printing one line (a
process per turn, as exec agents are); the ACP agent is tests/agents/fake_acp_agent.py, which
echoes each prompt (one process for the whole conversation). The baseline is the exec path,
measured in the same run; the ratio is ACP turns/s over exec turns/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from core.host import Host
from core.store import tables as t
from tests.conftest import open_host

FAKE = str(Path(__file__).resolve().parents[1] / "agents" / "fake_acp_agent.py")
EXEC = [sys.executable, "-c", "import sys; sys.stdin.read(); print('done')"]


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _session(host: Host, tmp: Path, name: str, **profile: object) -> str:
    workflow = tmp / "plain.yml"
    if not workflow.exists():
        workflow.write_text(
            "id: plain\nname: Plain\nsteps:\n  - id: todo\n    name: Todo\n    position: 0\n"
            "    is_start_step: true\n"
        )
        host.workflows.import_file(workflow)
    wf = host.workflows.list()[0]
    host.profiles.add(name, **profile)  # type: ignore[arg-type]
    task = host.tasks.create(workflow=wf.id, title=name)
    return host.sessions.start(task.id, profile=name, external=False).id


def _rate(host: Host, session: str, turns: int) -> float:
    began = time.perf_counter()
    for n in range(turns):
        outcome = host.runtime.run_turn(session, f"turn {n}")
        assert outcome.ok, outcome
    return turns / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per timed path")
    parser.add_argument("--long", type=int, default=1000, help="ACP turns for the RSS figure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        with open_host(f"sqlite:///{tmp}/board.db") as host:
            script = tmp / "script.json"
            script.write_text(json.dumps({"turns": [[]]}))
            exec_session = _session(host, tmp, "exec", command=EXEC)
            acp_session = _session(
                host,
                tmp,
                "acp",
                command=[sys.executable, FAKE],
                protocol="acp",
                env={"FAKE_ACP_SCRIPT_FILE": str(script)},
            )
            host.runtime.run_turn(acp_session, "warm up")  # the SDK import and agent start
            host.runtime.run_turn(exec_session, "warm up")
            exec_rate = _rate(host, exec_session, args.turns)
            acp_rate = _rate(host, acp_session, args.turns)
            print(f"exec path: {exec_rate:8.1f} turns/s  (baseline, {args.turns} turns)")
            print(f"ACP path:  {acp_rate:8.1f} turns/s  ratio ACP/exec {acp_rate / exec_rate:.2f}")
            first = _rss()
            tenth = max(1, args.long // 10)
            _rate(host, acp_session, tenth)
            after_tenth = _rss()
            _rate(host, acp_session, args.long - tenth)
            after = _rss()
            with host.store.read() as conn:
                items = conn.execute(
                    sa.select(sa.func.count()).where(t.transcript_items.c.session_id == acp_session)
                ).scalar_one()
            print(
                f"RSS over {args.long} ACP turns: start {first / 2**20:.1f} MiB, after "
                f"{tenth} {after_tenth / 2**20:.1f} MiB, after {args.long} {after / 2**20:.1f} MiB "
                f"(growth after the first {tenth}: {(after - after_tenth) / 2**20:+.1f} MiB; "
                f"{items} transcript items kept)"
            )
            host.runtime.close()


if __name__ == "__main__":
    main()
