"""Issue 45 item 5: a lane's first cards at 100,000 tasks against a raw first page.

    python tests/benchmarks/bench_board_counts.py [--tasks 100000] [--rounds 7] [--pg URL]

Not a pytest module. The board is `bench_serve_board`'s (Office Default, the tasks written
straight into the table, a tenth with badge rows), served by a real `laneway serve`. Each round
times, back to back:

- **raw first page**: `SELECT * FROM tasks` of the first lane, oldest 200, in this process: the
  least a lane's first cards can cost (the floor);
- **lane page, counts=0**: `GET /api/board?workflow=W&step=S&limit=200&counts=0`, what the page
  asks for each lane now (its first cards);
- **lane page, counted**: the same without `counts=0`, what the page asked for each lane
  before (every lane's request recounted the whole workflow);
- **counts, once a load**: `GET /api/board?workflow=W&limit=1`, the one request a page load
  now makes for the lane headers, beside the lanes.

Prints min / median / max of each time and of the ratios to the raw page over the rounds, with
the load average. Target: lane page (counts=0) / raw first page <= 10 (median). `--pg` (default
`LANEWAY_TEST_PG_URL` when `--pg-too` is given) runs the same on a database of its own there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from core.store import tables as t  # noqa: E402
from tests.benchmarks.bench_serve_board import LANEWAY, TOKEN, _open, populate  # noqa: E402

TARGET = 10.0
PAGE = 200


def _timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def measure(url: str, tasks: int, rounds: int, state_dir: Path) -> dict[str, list[float]]:
    with _open(url) as host:
        name = populate(host, tasks, state_dir)
        wf = host.workflows.get(name)
        lane = wf.steps[0]
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    raw_page = (
        sa.select(t.tasks)
        .where(
            t.tasks.c.workflow_id == wf.id,
            t.tasks.c.workflow_step_id == lane.id,
            t.tasks.c.archived_at.is_(None),
        )
        .order_by(t.tasks.c.created_at, t.tasks.c.id)
        .limit(PAGE)
    )

    def raw() -> None:
        with engine.connect() as conn:
            assert len(conn.execute(raw_page).all()) == PAGE

    serve = subprocess.Popen(
        [LANEWAY, "--db", url, "--json", "serve", "--port", "0", "--token", TOKEN],
        stdout=subprocess.PIPE,
        text=True,
    )
    times: dict[str, list[float]] = {
        "raw first page": [],
        "lane page, counts=0": [],
        "lane page, counted": [],
        "counts, once a load": [],
    }
    try:
        assert serve.stdout is not None
        base = json.loads(serve.stdout.readline())["url"].rstrip("/")
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=base, headers=auth, timeout=300) as client:

            def get(**params: str) -> Callable[[], None]:
                def call() -> None:
                    answer = client.get("/api/board", params={"workflow": wf.id, **params})
                    assert answer.status_code == 200, answer.text

                return call

            works = {
                "raw first page": raw,
                "lane page, counts=0": get(step=lane.id, limit=str(PAGE), counts="0"),
                "lane page, counted": get(step=lane.id, limit=str(PAGE)),
                "counts, once a load": get(limit="1"),
            }
            for work in works.values():  # caches warm, statements prepared: untimed
                work()
            for _round in range(rounds):
                for label, work in works.items():
                    times[label].append(_timed(work))
    finally:
        serve.terminate()
        serve.wait(30)
        engine.dispose()
    return times


def _spread(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def report(db: str, tasks: int, times: dict[str, list[float]]) -> bool:
    raw = times["raw first page"]
    print(f"\n{db}, {tasks:,} tasks, {len(raw)} rounds, load average {os.getloadavg()[0]:.1f}")
    print(f"{'figure':<24}{'ms min / median / max':>28}{'/ raw page min / median / max':>34}")
    ok = True
    for label, values in times.items():
        ratios = [v / r for v, r in zip(values, raw, strict=True)]
        ms = _spread([v * 1000 for v in values], ".1f")
        print(f"{label:<24}{ms:>28}{_spread(ratios, '.1f'):>34}")
        if label == "lane page, counts=0":
            ok = statistics.median(ratios) <= TARGET
    print(
        f"target: first cards (lane page, counts=0) <= {TARGET:g}x raw: {'PASS' if ok else 'FAIL'}"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pg", default=None, help="also on this PostgreSQL server")
    parser.add_argument(
        "--pg-too", action="store_true", help="also on PostgreSQL at LANEWAY_TEST_PG_URL"
    )
    args = parser.parse_args()
    os.environ.setdefault("LANEWAY_PLUGINS_ALLOW", "kanban,office")
    print(f"issue 45 item 5, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    ok = True
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{scratch}/board.db"
        got = measure(url, args.tasks, args.rounds, Path(scratch) / "agents")
        ok &= report("sqlite", args.tasks, got)
        pg = args.pg or (os.environ.get("LANEWAY_TEST_PG_URL") if args.pg_too else None)
        if pg:
            admin = sa.create_engine(
                pg.replace("postgresql://", "postgresql+psycopg://", 1),
                isolation_level="AUTOCOMMIT",
            )
            name = f"laneway_bench_counts_{os.getpid()}"
            with admin.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
            try:
                url = pg.rsplit("/", 1)[0] + f"/{name}"
                got = measure(url, args.tasks, args.rounds, Path(scratch) / "pg-agents")
                ok &= report("postgresql", args.tasks, got)
            finally:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                admin.dispose()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
