"""Arrival cost on a small board and on a big one (issue 14, target 4), on SQLite.

    python -m tests.benchmarks.bench_scale            # 1,000 tasks vs 100,000 tasks
    python -m tests.benchmarks.bench_scale --full     # 1,000 tasks vs 1,000,000 tasks

Two boards, each the Office Default workflow with three reviewer seats (the same arrival as
bench_arrivals.py's (c): clear_decisions and a three-run fan-out). On each, 100 tasks are made
through the Host API and the rest of the board (`--tasks` minus 100) is bulk-inserted with
executemany, spread round-robin over every step of the workflow (admitted), the way a big board
looks. The timed work is Work -> Review -> Work round trips of the 100 hot tasks; the figure
is the time of the Review arrivals.

Both hosts stay open and the rounds alternate (small, big, small, big, ...), so a load spike on
the machine hits both; the median round of each is compared. Target: the big board's arrival
rate >= 0.9 x the small board's (its cost at most 1/0.9 of it). The small board is the
baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from loguru import logger  # noqa: E402

from core import Host, ids  # noqa: E402
from core.plugin.selection import PluginSelection  # noqa: E402
from core.store import tables as t  # noqa: E402

TARGET = 0.9
HOT = 100
CHUNK = 50_000


class Board:
    def __init__(self, path: Path, tasks: int) -> None:
        selection = PluginSelection(allow=frozenset({"kanban", "office"}))
        self.host = Host.open(f"sqlite:///{path}", plugins=selection)
        host = self.host
        workflow = host.workflows.create_from_template("office-default")
        for r in range(3):
            profile = host.profiles.add(f"bench-reviewer-{r}", command=["true"])
            host.participants.add(
                step="Review", role="reviewer", profile=profile.id, workflow=workflow.id
            )
        self.hot = [host.tasks.create(workflow=workflow.id, title=f"hot{i}").id for i in range(HOT)]
        sample = host.tasks.get(self.hot[0])
        steps = [s.id for s in workflow.steps]
        stamp = ids.now()
        made = time.perf_counter()
        batch: list[dict[str, Any]] = []
        with host.store.transaction() as uow:
            for i in range(max(0, tasks - HOT)):
                batch.append(
                    {
                        "id": ids.new_id(),
                        "workspace_id": sample.workspace_id,
                        "workflow_id": workflow.id,
                        "workflow_step_id": steps[i % len(steps)],
                        "title": f"bulk{i}",
                        "position": i,
                        "wip_admitted": True,
                        "created_at": stamp,
                        "updated_at": stamp,
                    }
                )
                if len(batch) >= CHUNK:
                    uow.conn.execute(sa.insert(t.tasks), batch)
                    batch = []
            if batch:
                uow.conn.execute(sa.insert(t.tasks), batch)
        self.setup_s = time.perf_counter() - made
        self.turn = 0

    def round(self, arrivals: int) -> float:
        """Seconds per Review arrival over `arrivals` round trips."""
        spent = 0.0
        for _ in range(arrivals):
            task = self.hot[self.turn % HOT]
            self.turn += 1
            began = time.perf_counter()
            self.host.tasks.move(task, "Review")
            spent += time.perf_counter() - began
            self.host.tasks.move(task, "Work")
        return spent / arrivals


def full_scans(board: Board, path: Path) -> tuple[int, list[str]]:
    """Every distinct statement one arrival round runs, on every connection of the host (the
    prepared ones included: they are traced at the driver), and those whose EXPLAIN QUERY PLAN
    scans a table instead of searching an index: the statements whose cost grows with the
    board."""
    seen: list[str] = []

    def trace(dbapi_conn: Any, *_args: Any) -> None:
        dbapi_conn.set_trace_callback(seen.append)

    engine = board.host.store.engine
    sa.event.listen(engine, "checkout", trace)
    writer = board.host.store._writer_conn().connection.dbapi_connection
    writer.set_trace_callback(seen.append)  # type: ignore[union-attr]
    try:
        board.round(3)
    finally:
        writer.set_trace_callback(None)  # type: ignore[union-attr]
        sa.event.remove(engine, "checkout", trace)
    skip = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA")
    shapes: dict[str, str] = {}
    for sql in seen:
        if sql.split(None, 1)[0].upper() not in skip:
            shapes.setdefault(re.sub(r"'[^']*'|\b\d+\b", "?", sql), sql)
    scans: list[str] = []
    con = sqlite3.connect(path)
    try:
        for sql in shapes.values():
            plan = [str(r[-1]) for r in con.execute(f"EXPLAIN QUERY PLAN {sql}")]
            # "SCAN CONSTANT ROW" is the one-row VALUES of an INSERT ... SELECT: no table.
            if any(
                p.startswith("SCAN ") and " USING " not in p and p != "SCAN CONSTANT ROW"
                for p in plan
            ):
                scans.append(f"{' '.join(sql.split())[:160]} -> {plan}")
    finally:
        con.close()
    return len(shapes), scans


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks on the big board")
    parser.add_argument("--full", action="store_true", help="1,000,000 tasks on the big board")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--arrivals", type=int, default=100, help="arrivals per round")
    args = parser.parse_args(argv)
    big_n = 1_000_000 if args.full else args.tasks
    logger.remove()
    with tempfile.TemporaryDirectory(prefix="laneway-bench-scale-") as tmp:
        small = Board(Path(tmp) / "small.db", args.small)
        big = Board(Path(tmp) / "big.db", big_n)
        try:
            print(f"bulk insert: {big_n - HOT:,} tasks in {big.setup_s:.1f} s")
            shapes, scans = full_scans(big, Path(tmp) / "big.db")
            print(f"arrival path: {shapes} distinct statements, {len(scans)} scan a table")
            for line in scans:
                print(f"  SCAN: {line}")
            small.round(args.arrivals)  # warm both: statement caches, pages
            big.round(args.arrivals)
            timings: dict[str, list[float]] = {"small": [], "big": []}
            for _ in range(args.rounds):
                timings["small"].append(small.round(args.arrivals))
                timings["big"].append(big.round(args.arrivals))
        finally:
            small.host.close()
            big.host.close()
    cost_small = statistics.median(timings["small"])
    cost_big = statistics.median(timings["big"])
    ratio = cost_small / cost_big
    ok = ratio >= TARGET
    print(f"{'board':<22} {'ms per Review arrival (median round)':>38}")
    print(f"{f'{args.small:,} tasks':<22} {cost_small * 1000:>38.3f}")
    print(f"{f'{big_n:,} tasks':<22} {cost_big * 1000:>38.3f}")
    print(
        f"rate at {big_n:,} / rate at {args.small:,} = {ratio:.3f} "
        f"(target >= {TARGET}) {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
