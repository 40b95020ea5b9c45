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
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import struct
import sys
import tempfile
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
    args = parser.parse_args(argv)
    from loguru import logger

    logger.remove()  # the host logs every run it queues; the figures are the output here
    with tempfile.TemporaryDirectory(prefix="laneway-pages-") as tmp:
        result = measure(Path(tmp), args.tasks, args.warm, args.counted)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
