"""SQLite pages written per Office Review arrival, by table and index.

    python -m tests.benchmarks.bench_arrival_pages [--tasks N] [--warm N] [--counted N] [--json]

Issue 14, target 2 (SQLite side). A commit in WAL mode appends one frame per page the
transaction changed, and the cost of a commit (and of the checkpoint that later copies those
frames back into the database) grows with that count. This probe shows where the frames go:

- it builds the same board as `bench_office_arrival` (Office Default, three reviewer seats,
  tasks alternating Work -> Review -> Work) and runs `--warm` round trips first, so the tables
  and indexes have the size they reach during the timed benchmark;
- before each counted Review arrival it truncates the WAL (`PRAGMA wal_checkpoint(TRUNCATE)`
  on a connection of its own), so afterwards the WAL holds exactly the arrival's frames;
- it reads each frame's page number from the WAL file (a 24-byte header per frame, SQLite's
  documented file format) and names the b-tree that owns the page through the `dbstat`
  virtual table: a table, an index (`sqlite_autoindex_*` is a primary key or unique
  constraint), `sqlite_schema`, or `(free)` for a page a commit released.

Figures are frames per arrival (a page written by both commits counts twice, as in the WAL),
distinct pages per arrival, and commits per arrival. The Work move back is not counted.

`--commit-cost` adds what a frame costs to commit on this machine: plain sqlite3 transactions
(same pragmas) that insert one row into each of N tables with a random-keyed index, timed
around the COMMIT alone for several N, their frames counted from the WAL as above, and a
straight line fitted through (frames, commit time). The arrival's frames and commits priced on
that line are the least its commits can cost, whatever Python does around them.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.benchmarks.bench_arrivals import OfficeLoop, open_host  # noqa: E402

WAL_HEADER = 32
FRAME_HEADER = 24


def wal_frames(wal: Path) -> list[tuple[int, bool]]:
    """(page number, ends a commit) of every valid frame in the WAL file, in order.

    Frames after a checkpoint restart carry the header's current salts; stale frames from an
    earlier generation (left behind when the log restarted) carry old salts and are skipped."""
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < WAL_HEADER:
        return []
    page_size = struct.unpack(">I", data[8:12])[0]
    salts = data[16:24]
    frames: list[tuple[int, bool]] = []
    offset = WAL_HEADER
    while offset + FRAME_HEADER + page_size <= len(data):
        page, commit_size = struct.unpack(">II", data[offset : offset + 8])
        if data[offset + 8 : offset + 16] != salts:
            break
        frames.append((page, commit_size != 0))
        offset += FRAME_HEADER + page_size
    return frames


def page_owners(db: Path) -> dict[int, str]:
    """Page number -> the table or index whose b-tree holds it (overflow pages included)."""
    con = sqlite3.connect(db)
    try:
        return {int(p): str(n) for n, p in con.execute("SELECT name, pageno FROM dbstat")}
    finally:
        con.close()


def truncate_wal(db: Path) -> None:
    con = sqlite3.connect(db, isolation_level=None)
    try:
        busy, _log, _done = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise SystemExit("the WAL could not be truncated: a reader held it")
    finally:
        con.close()


def measure(directory: Path, tasks: int, warm: int, counted: int) -> dict[str, Any]:
    db = directory / "board.db"
    wal = db.with_name(db.name + "-wal")
    by_owner: Counter[str] = Counter()
    distinct = 0
    commits = 0
    with open_host(f"sqlite:///{db}") as host:
        loop = OfficeLoop(host, tasks)
        for i in range(warm):
            loop.to_review(i)
            loop.to_work(i)
        for i in range(warm, warm + counted):
            truncate_wal(db)
            loop.to_review(i)
            frames = wal_frames(wal)
            owners = page_owners(db)
            by_owner.update(owners.get(page, "(free)") for page, _end in frames)
            distinct += len({page for page, _end in frames})
            commits += sum(1 for _page, end in frames if end)
            loop.to_work(i)
    n = max(counted, 1)
    return {
        "frames": sum(by_owner.values()) / n,
        "distinct_pages": distinct / n,
        "commits": commits / n,
        "by_owner": {name: count / n for name, count in by_owner.most_common()},
        "page_size": _page_size(db),
    }


def commit_cost(
    directory: Path, widths: tuple[int, ...] = (1, 2, 4, 8, 12), rounds: int = 2000
) -> dict[str, Any]:
    """Commit time against WAL frames for transactions touching `width` indexed tables."""
    db = directory / "commits.db"
    wal = db.with_name(db.name + "-wal")
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        for n in range(max(widths)):
            con.execute(f"CREATE TABLE t{n} (id INTEGER PRIMARY KEY, k TEXT, v TEXT)")
            con.execute(f"CREATE INDEX i{n} ON t{n} (k)")
            con.execute("BEGIN")
            con.executemany(
                f"INSERT INTO t{n} (k, v) VALUES (?, ?)",
                ((os.urandom(8).hex(), "x" * 50) for _ in range(5_000)),
            )
            con.execute("COMMIT")
        rows: list[dict[str, float]] = []
        for width in widths:
            inserts = [f"INSERT INTO t{n} (k, v) VALUES (?, 'y')" for n in range(width)]

            def transaction(inserts: list[str] = inserts) -> float:
                con.execute("BEGIN")
                for sql in inserts:
                    con.execute(sql, (os.urandom(8).hex(),))
                began = time.perf_counter()
                con.execute("COMMIT")
                return time.perf_counter() - began

            frames = 0
            for _ in range(50):
                truncate_wal(db)
                transaction()
                frames += len(wal_frames(wal))
            spent = sum(transaction() for _ in range(rounds))
            rows.append({"tables": width, "frames": frames / 50, "commit_us": spent / rounds * 1e6})
    finally:
        con.close()
    # least squares: commit_us = per_commit + per_frame * frames
    xs = [r["frames"] for r in rows]
    ys = [r["commit_us"] for r in rows]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    per_frame = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    return {"rows": rows, "per_frame_us": per_frame, "per_commit_us": mean_y - per_frame * mean_x}


def _page_size(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute("PRAGMA page_size").fetchone()[0])
    finally:
        con.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100, help="tasks cycled through")
    parser.add_argument("--warm", type=int, default=2000, help="round trips before counting")
    parser.add_argument("--counted", type=int, default=200, help="Review arrivals counted")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--commit-cost", action="store_true", help="also price a WAL frame's commit here"
    )
    args = parser.parse_args(argv)
    from loguru import logger

    logger.remove()  # the host logs every run it queues; the figures are the output here
    with tempfile.TemporaryDirectory(prefix="laneway-pages-") as tmp:
        result = measure(Path(tmp), args.tasks, args.warm, args.counted)
        if args.commit_cost:
            cost = commit_cost(Path(tmp))
            result["commit_cost"] = cost
            result["commits_us_at_least"] = (
                result["frames"] * cost["per_frame_us"] + result["commits"] * cost["per_commit_us"]
            )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"WAL frames per Office Review arrival ({args.tasks} tasks, {args.warm} round trips "
        f"before, {args.counted} counted, {result['page_size']} B pages)"
    )
    for name, frames in result["by_owner"].items():
        print(f"  {name:<44} {frames:6.2f}")
    print(f"  {'total frames':<44} {result['frames']:6.2f}")
    print(f"  {'distinct pages':<44} {result['distinct_pages']:6.2f}")
    print(f"  {'commits':<44} {result['commits']:6.2f}")
    if args.commit_cost:
        cost = result["commit_cost"]
        print("\nCommit time against WAL frames (plain sqlite3, one row into each of N tables)")
        for row in cost["rows"]:
            print(
                f"  {row['tables']:>3} tables  {row['frames']:6.2f} frames  "
                f"{row['commit_us']:7.1f} us per commit"
            )
        print(
            f"  fitted: {cost['per_commit_us']:.1f} us per commit + "
            f"{cost['per_frame_us']:.2f} us per frame"
        )
        print(
            f"  this arrival's commits, priced on that line: {result['commits_us_at_least']:.0f} us"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
