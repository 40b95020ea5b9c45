"""A trivial turn of the real Claude Code agent through laneway vs the same adapter driven by a
bare ACP client loop (issue 41), and laneway's RSS over many real-adapter turns.

    LANEWAY_ACP_ADAPTERS=.ci/acp-adapters/node_modules \\
        python -m tests.benchmarks.bench_real_claude_turns             # 30 turns each, 200 for RSS
    python -m tests.benchmarks.bench_real_claude_turns --turns 10 --long 50

The agent is `@agentclientprotocol/claude-agent-acp` (found as the tests find it), its model
answered by tests/agents/anthropic_standin.py on loopback: every turn is one model request
answered with a line of text, so what is timed is the path around the model, not the model. The
stand-in runs in this process's threads and keeps no request (each carries the whole growing
conversation: recording them would be most of the RSS growth measured).

- **floor**: the `agent-client-protocol` package's own client (`acp.spawn_agent_process`), one
  process and one ACP session, `session/prompt` after `session/prompt`, updates dropped.
- **laneway**: `host.runtime.run_turn` on one session of a SQLite board (the runtime a worker
  runs each claimed run with): the live conversation kept between turns, each turn's prompt,
  transcript items and usage written to the board, laneway's tool server offered to the agent.

Both take a warm-up turn first (the agent's start). The figure is laneway's turn time over the
floor's, min/median/max over the turns (each side's i-th fastest over the other's i-th), and the
RSS of this process (which runs laneway's side) after the first tenth and after all of `--long`
turns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import AllowedOutcome, RequestPermissionResponse

from core.host import Host
from tests.agents.anthropic_standin import Standin, Text, anthropic, environment
from tests.conftest import open_host


def _adapter() -> str:
    folder = os.environ.get("LANEWAY_ACP_ADAPTERS")
    found = Path(folder or "", ".bin", "claude-agent-acp")
    if not folder or not found.exists():
        raise SystemExit("set LANEWAY_ACP_ADAPTERS to a node_modules with claude-agent-acp")
    return str(found.resolve())


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _env(standin: Standin, home: Path) -> dict[str, str]:
    base = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    return {**base, **environment(standin, str(home))}


class _Quiet:
    """The bare client: drops updates, allows whatever is asked (nothing is, for text)."""

    async def session_update(self, *_args: Any, **_kwargs: Any) -> None:
        return None

    async def request_permission(self, options: Any, *_args: Any, **_kwargs: Any) -> Any:
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id)
        )


async def _floor(command: str, env: dict[str, str], cwd: Path, turns: int) -> list[float]:
    times: list[float] = []
    async with spawn_agent_process(
        _Quiet(),  # type: ignore[arg-type]
        command,
        env=env,
        cwd=cwd,
        transport_kwargs={"limit": 16 * 2**20},
    ) as (conn, _process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[text_block("warm up")])
        for n in range(turns):
            began = time.perf_counter()
            await conn.prompt(session_id=session.session_id, prompt=[text_block(f"turn {n}")])
            times.append(time.perf_counter() - began)
    return times


def _laneway_session(host: Host, tmp: Path, command: str, env: dict[str, str]) -> str:
    workflow = tmp / "plain.yml"
    workflow.write_text(
        "id: plain\nname: Plain\nsteps:\n  - id: todo\n    name: Todo\n    position: 0\n"
        "    is_start_step: true\n"
    )
    (wf,) = host.workflows.import_file(workflow)
    host.profiles.add("claude", command=[command], protocol="acp", env=env, permissions="allow")
    task = host.tasks.create(workflow=wf.id, title="bench")
    return host.sessions.start(task.id, profile="claude", external=False).id


def _turns(host: Host, session: str, turns: int) -> list[float]:
    times: list[float] = []
    for n in range(turns):
        began = time.perf_counter()
        outcome = host.runtime.run_turn(session, f"turn {n}")
        times.append(time.perf_counter() - began)
        assert outcome.ok, outcome
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30, help="timed turns on each side")
    parser.add_argument("--long", type=int, default=200, help="laneway turns for the RSS figure")
    args = parser.parse_args()
    command = _adapter()
    with tempfile.TemporaryDirectory() as folder, anthropic(then=Text("ok"), keep=False) as standin:
        tmp = Path(folder)
        (tmp / "home").mkdir()
        env = _env(standin, tmp / "home")
        floor = asyncio.run(_floor(command, env, tmp, args.turns))
        with open_host(f"sqlite:///{tmp}/board.db") as host:
            session = _laneway_session(host, tmp, command, env)
            host.runtime.run_turn(session, "warm up")
            ours = _turns(host, session, args.turns)
            ratios = [a / b for a, b in zip(sorted(ours), sorted(floor), strict=True)]
            print(
                f"floor (bare ACP client): median {statistics.median(floor) * 1000:7.1f} ms a turn"
                f" (min {min(floor) * 1000:.1f}, max {max(floor) * 1000:.1f})"
            )
            print(
                f"laneway (run_turn):      median {statistics.median(ours) * 1000:7.1f} ms a turn"
                f" (min {min(ours) * 1000:.1f}, max {max(ours) * 1000:.1f})"
            )
            print(
                f"laneway/floor: min {min(ratios):.2f}  median {statistics.median(ratios):.2f}  "
                f"max {max(ratios):.2f}  ({args.turns} turns each)"
            )
            first = _rss()
            tenth = max(1, args.long // 10)
            _turns(host, session, tenth)
            after_tenth = _rss()
            _turns(host, session, args.long - tenth)
            after = _rss()
            print(
                f"RSS over {args.long} real-adapter turns: start {first / 2**20:.1f} MiB, after "
                f"{tenth} {after_tenth / 2**20:.1f} MiB, after {args.long} {after / 2**20:.1f} MiB"
                f" (growth after the first {tenth}: {(after - after_tenth) / 2**20:+.1f} MiB)"
            )
            host.runtime.close()


if __name__ == "__main__":
    main()
