"""The startup recovery scan at size (issue 14, target 3), on SQLite (and PostgreSQL).

    python -m tests.benchmarks.bench_recovery          # 1,000 and 10,000 pending among 100,000
    python -m tests.benchmarks.bench_recovery --full   # adds 100,000 pending among 1,000,000
    python -m tests.benchmarks.bench_recovery --pg-url URL   # the same cases on PostgreSQL too

Each case is a board whose tasks stand at the Office Default Review step (clear_decisions and a
three-seat reviewer fan-out: two durable positions) with `entries` step entries each, inserted
directly with executemany. `pending` of them per task are left non-terminal and unmarked, none
of them the task's newest, so the scan resolves every one as skipped(superseded): it writes two
skipped markers (and their events) and sets the entry terminal. The host is opened with
`recover=False`; `core.recovery.scan(host)` is then timed alone.

loguru's default stderr handler is removed first (laneway itself logs at WARNING unless told
otherwise), so the INFO record per closed entry is neither printed nor, since no handler takes
INFO, built (`core.recovery._info_wanted`), as in a host that logs at WARNING.

Two baselines are measured in the same run, each on a copy of the same file. The raw floor is
the least a scan can do with Python's sqlite3 module: read the pending rows through the pending
index and set each terminal with one executemany in one transaction (no markers, no events).
The write floor is what the scan must write, written by sqlite3 with no decisions and no
conditions: per batch of `core.recovery.BATCH` entries, one transaction holding one UPDATE of
the batch, an executemany of its skipped markers and one of its `entry.marker` events. Both
floors use the connection settings the scan's writer has (WAL, synchronous=NORMAL, foreign
keys, `core.recovery.SCAN_CACHE_KIB` of page cache). For the write floor and the scan, the
process's CPU seconds and the MB it wrote are printed too: on a shared machine the wall time
swings with the load, these two do not. Targets:
1,000 pending among 100,000 <= 0.3 s; 100,000 among 1,000,000 <= 10 s (--full). The middle case
(10,000 among 100,000) has no target of its own; its per-entry cost is shown next to the 10 s
target's budget of 0.1 ms per pending entry.

With `--pg-url` (or LANEWAY_TEST_PG_URL; `source /tmp/pgenv` on the project's machines) every
case runs again on a PostgreSQL database of its own, for information (the targets are stated
for SQLite): its raw floor is the same read and executemany UPDATE through psycopg, on a copy
made with CREATE DATABASE ... TEMPLATE.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from loguru import logger

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from core import Host, ids, ledger, recovery  # noqa: E402
from core.plugin.selection import PluginSelection  # noqa: E402
from core.store import dialect  # noqa: E402
from core.store import tables as t  # noqa: E402

CHUNK = 50_000


@contextmanager
def usage() -> Iterator[dict[str, float]]:
    """This process's CPU seconds (user + system) and MB written (Linux: /proc/self/io wchar,
    what SQLite hands the kernel: WAL frames and checkpoints) inside the block. On a shared
    machine the wall time swings with the load; these two do not."""
    began, wrote = os.times(), _written()
    found: dict[str, float] = {}
    yield found
    ended = os.times()
    found["cpu_s"] = (ended.user - began.user) + (ended.system - began.system)
    found["written_mb"] = (_written() - wrote) / 1e6


def _written() -> int:
    try:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))
    except OSError:
        return 0


def open_host(url: str, **kwargs: Any) -> Host:
    selection = PluginSelection(allow=frozenset({"kanban", "office"}))
    return Host.open(url, plugins=selection, **kwargs)


def build(url: str, tasks: int, entries: int, pending: int) -> dict[str, Any]:
    """`tasks` tasks at Review with `entries` entries each, `pending` of them non-terminal
    (spread evenly, never the newest)."""
    made = time.perf_counter()
    with open_host(url, recover=False) as host:
        workflow = host.workflows.create_from_template("office-default")
        for r in range(3):
            profile = host.profiles.add(f"bench-reviewer-{r}", command=["true"])
            host.participants.add(
                step="Review", role="reviewer", profile=profile.id, workflow=workflow.id
            )
        review = host.workflows.step(workflow, "Review")
        digest = ledger.declaration_digest(review.actions("on_enter"))
        durable = ledger.durable_positions(host.bundle.registry, review.actions("on_enter"))
        task_ids = [
            host.tasks.create(workflow=workflow.id, title=f"r{i}", step="Review").id
            for i in range(tasks)
        ]
        stride = entries // pending
        stamp = ids.now()
        batch: list[dict[str, Any]] = []
        with host.store.transaction() as uow:
            for task in task_ids:
                for seq in range(1, entries + 1):
                    batch.append(
                        {
                            "id": ids.new_id(),
                            "task_id": task,
                            "step_id": review.id,
                            "entry_seq": seq,
                            "entry_path": "E2",
                            "declaration_digest": digest,
                            "terminal": seq % stride != stride // 2,
                            "created_at": stamp,
                        }
                    )
                    if len(batch) >= CHUNK:
                        uow.conn.execute(sa.insert(t.step_entries), batch)
                        batch = []
            if batch:
                uow.conn.execute(sa.insert(t.step_entries), batch)
    return {
        "setup_s": time.perf_counter() - made,
        "positions": [(d.position, d.kind) for d in durable],
    }


def raw_floor(path: Path) -> float:
    """Read the pending rows through the index and set them terminal, in one transaction."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute(f"PRAGMA cache_size=-{recovery.SCAN_CACHE_KIB}")  # as the scan's writer
    con.execute("PRAGMA synchronous=NORMAL")
    try:
        began = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        found = con.execute(
            "SELECT id FROM step_entries WHERE terminal IS 0 ORDER BY task_id, step_id, entry_seq"
        ).fetchall()
        con.executemany("UPDATE step_entries SET terminal = 1 WHERE id = ?", found)
        con.execute("COMMIT")
        return time.perf_counter() - began
    finally:
        con.close()


def write_floor(path: Path, positions: list[tuple[int, str]]) -> float:
    """What the scan must write, written by raw `sqlite3` with no decisions: per batch of
    `recovery.BATCH` pending entries, one transaction with one UPDATE setting them terminal,
    an executemany of their skipped markers and one of their `entry.marker` events."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA foreign_keys=ON")
    # the page cache the scan's writer connection has (journal_mode and synchronous are the
    # file's and laneway's defaults: WAL, NORMAL)
    con.execute(f"PRAGMA cache_size=-{recovery.SCAN_CACHE_KIB}")
    con.execute("PRAGMA synchronous=NORMAL")
    try:
        began = time.perf_counter()
        found = [
            (str(i), str(task))
            for i, task in con.execute(
                "SELECT id, task_id FROM step_entries WHERE terminal IS 0 "
                "ORDER BY task_id, step_id, entry_seq"
            )
        ]
        stamp = ids.now()
        for start in range(0, len(found), recovery.BATCH):
            batch = found[start : start + recovery.BATCH]
            marks = ",".join("?" * len(batch))
            con.execute("BEGIN IMMEDIATE")
            con.execute(
                f"UPDATE step_entries SET terminal = 1 WHERE id IN ({marks}) AND terminal IS NOT 1",
                [i for i, _task in batch],
            )
            con.executemany(
                "INSERT INTO step_entry_markers (entry_id, position, kind, state, epoch, "
                "reason, updated_at) VALUES (?, ?, ?, 'skipped', 'floor', 'superseded', ?) "
                "ON CONFLICT DO NOTHING",
                [(i, p, k, stamp) for i, _task in sorted(batch) for p, k in positions],
            )
            con.executemany(
                "INSERT INTO board_events (type, task_id, at, data) "
                "VALUES ('entry.marker', ?, ?, ?)",
                [
                    (task, stamp, json.dumps({"entry_id": i, "position": p, "kind": k}))
                    for i, task in batch
                    for p, k in positions
                ],
            )
            con.execute("COMMIT")
        return time.perf_counter() - began
    finally:
        con.close()


def pg_raw_floor(url: str) -> float:
    """`raw_floor` on PostgreSQL, through psycopg."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as con:
        began = time.perf_counter()
        with con.transaction(), con.cursor() as cur:
            cur.execute(
                "SELECT id FROM step_entries WHERE terminal = false "
                "ORDER BY task_id, step_id, entry_seq"
            )
            found = cur.fetchall()
            cur.executemany("UPDATE step_entries SET terminal = true WHERE id = %s", found)
        return time.perf_counter() - began


def timed_scan(url: str) -> tuple[float, dict[str, Any], int, dict[str, float]]:
    with open_host(url, recover=False) as host, usage() as used:
        began = time.perf_counter()
        report = recovery.scan(host)
        scan_s = time.perf_counter() - began
        with host.store.read() as conn:
            left = conn.execute(
                sa.select(sa.func.count()).where(t.step_entries.c.terminal.is_(False))
            ).scalar_one()
    return scan_s, report.as_dict(), int(left), used


def run_case(base: Path, tasks: int, entries: int, pending: int) -> dict[str, Any]:
    case = base / f"{tasks}x{entries}x{pending}"
    case.mkdir()
    info = build(f"sqlite:///{case / 'board.db'}", tasks, entries, pending)
    for copy in ("raw", "writes"):
        for suffix in ("", "-wal", "-shm"):
            source = case / f"board.db{suffix}"
            if source.exists():
                shutil.copy(source, case / f"{copy}.db{suffix}")
    raw_s = raw_floor(case / "raw.db")
    with usage() as floor_used:
        writes_s = write_floor(case / "writes.db", info["positions"])
    scan_s, report, left, scan_used = timed_scan(f"sqlite:///{case / 'board.db'}")
    shutil.rmtree(case)
    return {
        **info,
        "rows": tasks * entries,
        "pending": tasks * pending,
        "scan_s": scan_s,
        "raw_s": raw_s,
        "writes_s": writes_s,
        "scan_cpu_s": scan_used["cpu_s"],
        "scan_mb": scan_used["written_mb"],
        "writes_cpu_s": floor_used["cpu_s"],
        "writes_mb": floor_used["written_mb"],
        "report": report,
        "left": left,
    }


def run_pg_case(base_url: str, tasks: int, entries: int, pending: int) -> dict[str, Any]:
    """The same case on two PostgreSQL databases of this process's own, dropped after."""
    admin = sa.create_engine(
        dialect.normalise_url(base_url).set(database="postgres"), isolation_level="AUTOCOMMIT"
    )
    board, copy = (f"laneway_bench_recovery{s}_{os.getpid()}" for s in ("", "_raw"))
    root = base_url.rsplit("/", 1)[0]
    try:
        with admin.connect() as conn:
            for name in (board, copy):
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.exec_driver_sql(f"CREATE DATABASE {board}")
        info = build(f"{root}/{board}", tasks, entries, pending)
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {copy} TEMPLATE {board}")
        for name in (board, copy):
            engine = sa.create_engine(
                dialect.normalise_url(f"{root}/{name}"), isolation_level="AUTOCOMMIT"
            )
            with engine.connect() as conn:
                conn.exec_driver_sql("VACUUM ANALYZE")  # both start from fresh statistics
            engine.dispose()
        raw_s = pg_raw_floor(f"{root}/{copy}")
        scan_s, report, left, _used = timed_scan(f"{root}/{board}")
    finally:
        with admin.connect() as conn:
            for name in (board, copy):
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()
    return {
        **info,
        "rows": tasks * entries,
        "pending": tasks * pending,
        "scan_s": scan_s,
        "raw_s": raw_s,
        "report": report,
        "left": left,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--full", action="store_true", help="add 100,000 pending among 1,000,000 (a few minutes)"
    )
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("LANEWAY_TEST_PG_URL"),
        help="also run every case on PostgreSQL (default: LANEWAY_TEST_PG_URL)",
    )
    args = parser.parse_args(argv)
    logger.remove()  # a host logs at WARNING by default: the scan's per-entry INFO records
    # cost nothing there, and printing 100,000 of them here would time the terminal
    # (tasks, entries per task, pending per task, target seconds or None)
    cases: list[tuple[int, int, int, float | None]] = [
        (1_000, 100, 1, 0.3),
        (1_000, 100, 10, None),
    ]
    if args.full:
        cases.append((10_000, 100, 10, 10.0))
    failed = False
    print(
        f"{'case':<46} {'scan':>9} {'per entry':>10} {'raw floor':>10} {'scan/raw':>9} "
        f"{'write floor':>11} {'scan/wr':>7}  verdict"
    )
    with tempfile.TemporaryDirectory(prefix="laneway-bench-recovery-") as tmp:
        for tasks, entries, pending, target in cases:
            r = run_case(Path(tmp), tasks, entries, pending)
            failed = report_case("SQLite", r, target) or failed
    if args.pg_url:
        for tasks, entries, pending, _target in cases:
            r = run_pg_case(args.pg_url, tasks, entries, pending)
            failed = report_case("PostgreSQL", r, None) or failed
    else:
        print("PostgreSQL: not measured (no --pg-url / LANEWAY_TEST_PG_URL)")
    return 1 if failed else 0


def report_case(database: str, r: dict[str, Any], target: float | None) -> bool:
    """Print one row; True when it failed its target or its outcome is wrong."""
    failed = False
    per_ms = r["scan_s"] * 1000 / r["pending"]
    superseded = r["report"]["skipped"].get("superseded", 0)
    correct = r["left"] == 0 and superseded == r["pending"] and r["report"]["errors"] == 0
    if target is None:
        verdict = "(info: budget 0.100 ms/entry)"
    else:
        ok = r["scan_s"] <= target
        verdict = f"{'PASS' if ok else 'FAIL'} (<= {target:g} s)"
        failed = not ok
    if not correct:
        verdict += f" WRONG: report {r['report']}, {r['left']} left pending"
        failed = True
    label = f"{database}: {r['pending']:,} pending among {r['rows']:,}"
    writes = (
        f"{r['writes_s']:>9.3f}s {r['scan_s'] / r['writes_s']:>7.2f}x" if "writes_s" in r else ""
    )
    print(
        f"{label:<46} {r['scan_s']:>8.3f}s {per_ms:>7.3f} ms {r['raw_s']:>9.3f}s "
        f"{r['scan_s'] / r['raw_s']:>8.1f}x {writes:>19}  {verdict}",
        flush=True,
    )
    if "writes_cpu_s" in r:
        print(
            f"{'':<6}CPU: scan {r['scan_cpu_s']:.2f} s, write floor {r['writes_cpu_s']:.2f} s; "
            f"written: scan {r['scan_mb']:,.0f} MB, write floor {r['writes_mb']:,.0f} MB",
            flush=True,
        )
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
