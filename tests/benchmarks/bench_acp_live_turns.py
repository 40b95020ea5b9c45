"""A trivial turn of a live ACP conversation through a worker vs a bare `acp` client loop on the
same agent (issue 45 item 1), on SQLite and PostgreSQL.

    python -m tests.benchmarks.bench_acp_live_turns                 # 5 rounds of 100 turns
    python -m tests.benchmarks.bench_acp_live_turns --rounds 3 --turns 50 --pg URL

The agent is tests/agents/fake_acp_agent.py (it echoes each prompt), one process for the whole
conversation on both sides.

- **floor**: the `agent-client-protocol` package's own client (`acp.spawn_agent_process`), one
  ACP session, `session/prompt` after `session/prompt`, updates dropped.
- **laneway**: what a worker does for each run of one agent on one task: `claim_next`,
  `execute` (the run's prompt with the feedback block, the turn on the live conversation, its
  items and the agent's report written, the run finished), with the worker's one `CancelWatch`. The
  runs are queued before each round (not timed: the producer's cost).

A round runs both sides one after the other, so load hits both alike; the figures are laneway
turns/s over floor turns/s and the floor's CPU a turn over laneway's (this process's CPU time:
the client's side of each, the agent's process not counted; steadier than wall time on a
loaded machine), min/median/max over the rounds, with the load average printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block

from core.agents import worker
from core.host import Host
from core.runs import RunRequest
from tests.benchmarks.bench_many_processes import _admin
from tests.conftest import open_host

FAKE = str(Path(__file__).resolve().parents[1] / "agents" / "fake_acp_agent.py")


class _Quiet:
    async def session_update(self, *_args: Any, **_kwargs: Any) -> None:
        return None


async def _floor(cwd: Path, turns: int) -> tuple[float, float]:
    async with spawn_agent_process(
        _Quiet(),  # type: ignore[arg-type]
        sys.executable,
        FAKE,
        cwd=cwd,
    ) as (conn, _process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[text_block("warm up")])
        began, cpu = time.perf_counter(), time.process_time()
        for n in range(turns):
            await conn.prompt(session_id=session.session_id, prompt=[text_block(f"turn {n}")])
        return turns / (time.perf_counter() - began), (time.process_time() - cpu) / turns


def _board(host: Host, tmp: Path) -> tuple[str, str, str]:
    workflow = tmp / "plain.yml"
    workflow.write_text(
        "id: plain\nname: Plain\nsteps:\n  - id: todo\n"
        "    name: Todo\n    position: 0\n    is_start_step: true\n    prompt: Do it.\n"
    )
    (wf,) = host.workflows.import_file(workflow)
    profile = host.profiles.add("acp", command=[sys.executable, FAKE], protocol="acp")
    task = host.tasks.create(workflow=wf.id, title="bench", description="A trivial task.")
    host.comments.add(task.id, "an old comment, before the agent's first turn", author="alice")
    return profile.id, task.id, str(task.workflow_step_id)


def _queue(host: Host, agent: str, task: str, step: str, n: int) -> None:
    for _ in range(n):
        host.runs.enqueue(
            RunRequest(
                agent_profile_id=agent,
                task_id=task,
                workflow_step_id=step,
                reason="bench",
                coalesce_exempt=True,
            )
        )


def _drain(host: Host, watch: worker.CancelWatch, n: int) -> tuple[float, float]:
    began, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        run = worker.claim_next(host)
        assert run is not None
        outcome = worker.execute(host, run, watch)
        assert outcome.ok, outcome
    return n / (time.perf_counter() - began), (time.process_time() - cpu) / n


Round = tuple[tuple[float, float], tuple[float, float]]
"""(laneway turns/s, CPU s a turn), (floor turns/s, CPU s a turn)"""


def _one_database(url: str, tmp: Path, rounds: int, turns: int) -> list[Round]:
    got: list[Round] = []
    with open_host(url) as host:
        agent, task, step = _board(host, tmp)
        watch = worker.CancelWatch(host)
        with contextlib.closing(watch):
            _queue(host, agent, task, step, 2)
            _drain(host, watch, 2)  # the agent's start and the first run's whole block
            for _ in range(rounds):
                floor = asyncio.run(_floor(tmp, turns))
                _queue(host, agent, task, step, turns)
                ours = _drain(host, watch, turns)
                got.append((ours, floor))
        host.runtime.close()
    return got


def _report(db: str, got: list[Round], turns: int) -> None:
    ratios = [ours[0] / floor[0] for ours, floor in got]
    cpu = [floor[1] / ours[1] for ours, floor in got]
    print(
        f"{db:10s} laneway {statistics.median(o[0] for o, _ in got):7.1f} turns/s "
        f"({statistics.median(o[1] for o, _ in got) * 1000:.2f} ms CPU a turn)  "
        f"floor {statistics.median(f[0] for _, f in got):7.1f} turns/s "
        f"({statistics.median(f[1] for _, f in got) * 1000:.2f} ms CPU a turn)\n"
        f"{'':10s} turns/s ratio min {min(ratios):.3f} median {statistics.median(ratios):.3f} "
        f"max {max(ratios):.3f};  CPU ratio floor/laneway min {min(cpu):.3f} median "
        f"{statistics.median(cpu):.3f} max {max(cpu):.3f}  ({len(got)} rounds of {turns} turns; "
        f"load {os.getloadavg()[0]:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=100, help="turns per side and round")
    parser.add_argument("--pg", default=os.environ.get("LANEWAY_BENCH_PG_URL")
                        or os.environ.get("LANEWAY_TEST_PG_URL"))  # fmt: skip
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.only != "postgresql":
            got = _one_database(f"sqlite:///{tmp}/board.db", tmp, args.rounds, args.turns)
            _report("SQLite", got, args.turns)
        if args.pg and args.only != "sqlite":
            name = f"laneway_bench_live_{os.getpid()}"
            with _admin(args.pg) as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
            try:
                url = args.pg.rsplit("/", 1)[0] + f"/{name}"
                _report("PostgreSQL", _one_database(url, tmp, args.rounds, args.turns), args.turns)
            finally:
                with _admin(args.pg) as conn:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    main()
