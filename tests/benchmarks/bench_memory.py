"""A host's memory over many agent failures and moves (issue 14, target 5), on SQLite.

    python -m tests.benchmarks.bench_memory            # 50,000 failures, RSS at 10,000 vs 50,000
    python -m tests.benchmarks.bench_memory --full     # 1,000,000 failures (hours on 2 cores)
    python -m tests.benchmarks.bench_memory --failures 200000

One host (this process) on a "ping pong" board: each of the two steps sends the task to the
other on an agent error. Every iteration starts a new session on a task (a new task every 100
sessions), and delivers a terminal failure of it through `host.runtime.fail_and_dispatch`: the
failure bookkeeping under the session's guard, then the on_agent_error dispatch, which claims
the failure's operation id in the database and moves the task. So each iteration is one
failure, one durable operation id, one session guard and one move.

The process's resident set size (VmRSS, after a `gc.collect()`) is read after the first 10,000
failures (the baseline, measured in the same run) and again at the end; the target is
RSS(end) <= 1.2 x RSS(10,000). Intermediate readings are printed so growth shows as a trend.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from loguru import logger  # noqa: E402

from core import Host  # noqa: E402
from core.model import AgentFailure  # noqa: E402
from core.plugin.selection import PluginSelection  # noqa: E402

TARGET = 1.2
BASELINE_AT = 10_000
SESSIONS_PER_TASK = 100

PING_PONG = """\
id: ping
name: Ping pong
steps:
  - id: doing
    name: Doing
    position: 0
    is_start_step: true
    events:
      on_agent_error: [{type: move_to_step, config: {step_id: triage}}]
  - id: triage
    name: Triage
    position: 1
    events:
      on_agent_error: [{type: move_to_step, config: {step_id: doing}}]
"""


def rss_kib() -> int:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def guards_only(total: int) -> int:
    from core.agents.runtime import AgentRuntime

    runtime = AgentRuntime(cast(Any, None), retry_delays=())
    baseline = 0
    for i in range(1, total + 1):
        with runtime.guard(f"session-{i:012d}"):
            pass
        if i == BASELINE_AT:
            baseline = rss_kib()
    final = rss_kib()
    ratio = final / baseline
    ok = ratio <= TARGET
    print(
        f"guards of {total:,} sessions: RSS {baseline / 1024:.1f} MiB after {BASELINE_AT:,}, "
        f"{final / 1024:.1f} MiB after {total:,}: {ratio:.3f}x (target <= {TARGET}) "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--failures", type=int, default=50_000)
    parser.add_argument("--baseline-at", type=int, default=BASELINE_AT)
    parser.add_argument("--full", action="store_true", help="1,000,000 failures")
    parser.add_argument(
        "--guards-only",
        type=int,
        metavar="N",
        help="only take and release N distinct sessions' failure guards (no database): "
        "seconds, not hours, for the one structure that used to grow per failure",
    )
    args = parser.parse_args(argv)
    if args.guards_only:
        return guards_only(args.guards_only)
    baseline_at = args.baseline_at
    total = 1_000_000 if args.full else max(args.failures, baseline_at)
    logger.remove()  # a host in production logs to its own sinks; this measures the host only
    every = max(baseline_at, total // 10)
    with tempfile.TemporaryDirectory(prefix="laneway-bench-memory-") as tmp:
        board = Path(tmp) / "ping.yml"
        board.write_text(PING_PONG)
        selection = PluginSelection(allow=frozenset({"kanban", "office"}))
        with Host.open(f"sqlite:///{Path(tmp) / 'board.db'}", plugins=selection) as host:
            (workflow,) = host.workflows.import_file(board)
            task = ""
            baseline = 0
            began = time.perf_counter()
            print(f"{'failures':>10} {'RSS MiB':>9} {'vs base':>7} {'s':>8}")
            for i in range(1, total + 1):
                if (i - 1) % SESSIONS_PER_TASK == 0:
                    task = host.tasks.create(workflow=workflow.id, title=f"m{i}").id
                session = host.sessions.start(task)
                host.runtime.fail_and_dispatch(
                    AgentFailure(
                        task,
                        session.id,
                        "R1",
                        "agent exited with status 1",
                        agent_execution_id=f"exec-{i}",
                    )
                )
                if i in (baseline_at, total) or i % every == 0:
                    now = rss_kib()
                    baseline = baseline or now
                    print(
                        f"{i:>10,} {now / 1024:>9.1f} {now / baseline:>6.3f}x "
                        f"{time.perf_counter() - began:>8.1f}"
                    )
            final = rss_kib()
            moved = host.tasks.get(task).workflow_step_id
            guards = len(host.runtime.guards.held)
    ratio = final / baseline
    ok = ratio <= TARGET
    print(
        f"RSS after {baseline_at:,} failures {baseline / 1024:.1f} MiB, after {total:,} "
        f"{final / 1024:.1f} MiB: {ratio:.3f}x (target <= {TARGET}) {'PASS' if ok else 'FAIL'}"
    )
    print(f"session guards still held by the runtime: {guards}")
    print(f"(the last task stands at step {moved}; every failure moved its task)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
