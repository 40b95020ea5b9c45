"""Office Review arrivals against a raw SQLite transaction and a DBOS workflow, in one run.

    python -m tests.benchmarks.bench_office_arrival [--seconds N] [--tasks N] [--pg-url URL]

Issue 14, target 2. Measured side by side, because absolute figures swing about 2x on a
shared machine and only ratios taken in the same run compare:

- raw: Python's sqlite3, `BEGIN; UPDATE tasks; INSERT history; COMMIT` per move (WAL,
  synchronous=NORMAL) - the least a durable step change can cost;
- DBOS: a DBOS Transact workflow of three steps (`pip install dbos`, the `bench` extra), on a
  SQLite system database with laneway's pragmas (WAL, synchronous=NORMAL) and on PostgreSQL,
  each in a child process of its own (DBOS is a process-wide singleton);
- laneway: `host.tasks.move(task, "Review")` on the shipped Office Default workflow with three
  reviewer seats (clear_decisions + the fan-out: one entry, two markers, three runs), on SQLite
  and on PostgreSQL; tasks alternate Work -> Review -> Work and the rate counts Review arrivals
  over the time spent in the Review moves only.

A counted pass then reports per Review arrival: SQL statements (SQLAlchemy's cursor events
plus laneway's direct-cursor statements, `core.store.prepared.STATS`), commits of writer
transactions, savepoints, and on PostgreSQL the client/server round trips (every statement,
less those sent in one pipeline with another statement or with the COMMIT, plus the BEGIN -
unless pipelined with the first statement - and the COMMIT psycopg sends for each
non-autocommit transaction).

PostgreSQL figures need a server: `--pg-url` or LANEWAY_TEST_PG_URL (`source /tmp/pgenv` on
the team's machine). The benchmark creates databases of its own there and drops them after.
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from core.store import dialect
from core.store.prepared import STATS
from tests.benchmarks.bench_arrivals import OfficeLoop, bench_raw, open_host

TARGET_COMMITS = 3
TARGET_RAW_RATIO = 0.10
TARGET_DBOS_SQLITE = 6.0
TARGET_DBOS_PG = 3.0
SEATS = 3


# -- DBOS, in a child process ------------------------------------------------------------------


def _dbos_child(url: str, seconds: float) -> None:
    """Run inside the child: launch DBOS on `url`, time 3-step workflows, print the rate."""
    import logging

    from dbos import DBOS, DBOSConfig

    logging.getLogger("dbos").setLevel(logging.WARNING)
    config: DBOSConfig = {"name": "laneway-bench", "run_admin_server": False}
    if url.startswith("sqlite"):
        # DBOS's own SQLite engine, with laneway's pragmas added (WAL, synchronous=NORMAL):
        # the same durability on both sides.
        engine = sa.create_engine(url)

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = "IMMEDIATE"
            dbapi_conn.execute("PRAGMA busy_timeout=30000")
            dbapi_conn.execute("PRAGMA foreign_keys=ON")
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

        config["system_database_url"] = url
        config["system_database_engine"] = engine
    else:
        config["system_database_url"] = url
    DBOS(config=config)

    @DBOS.step()
    def step(value: int) -> int:
        return value + 1

    @DBOS.workflow()
    def workflow(value: int) -> int:
        return int(step(step(step(value))))

    DBOS.launch()
    try:
        for i in range(50):  # warm up
            workflow(i)
        done = 0
        start = time.perf_counter()
        while True:
            workflow(done)
            done += 1
            if done % 8 == 0 and time.perf_counter() - start >= seconds:
                break
        elapsed = time.perf_counter() - start
    finally:
        DBOS.destroy()
    print(json.dumps({"rate": done / elapsed, "workflows": done}))


def bench_dbos(url: str, seconds: float) -> dict[str, Any]:
    """The DBOS rate in a child process, or why it could not be measured."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        return {"error": "dbos is not installed (pip install -e '.[bench]')"}
    child = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bench_office_arrival", "--dbos-child", url],
        capture_output=True,
        text=True,
        timeout=seconds * 4 + 120,
        check=False,
        env={**os.environ, "BENCH_SECONDS": str(seconds)},
        cwd=Path(__file__).resolve().parents[2],
    )
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"DBOS child exited {child.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# -- counting ----------------------------------------------------------------------------------


class Counter:
    """Statements, commits, savepoints and PostgreSQL round trips on one engine."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.on = False
        self.arrivals = 0
        self.statements = 0
        self.prepared = 0
        self.savepoints = 0
        self.writer_commits = 0
        self.other_commits = 0
        self.begins = 0
        self.pipelined_begins = 0
        self.piggybacked = 0
        self.pg = engine.dialect.name == "postgresql"
        self._listeners = [
            ("before_cursor_execute", self._statement),
            ("commit", self._commit),
            ("begin", self._begin),
            ("savepoint", self._savepoint),
        ]
        for name, fn in self._listeners:
            sa.event.listen(engine, name, fn)

    @staticmethod
    def _autocommit(conn: sa.Connection) -> bool:
        return conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"

    def _statement(self, *_args: Any) -> None:
        if self.on:
            self.statements += 1

    def _savepoint(self, *_args: Any) -> None:
        if self.on:
            self.savepoints += 1

    def _begin(self, conn: sa.Connection) -> None:
        if self.on and not self._autocommit(conn):
            self.begins += 1

    def _commit(self, conn: sa.Connection) -> None:
        if not self.on or self._autocommit(conn):
            return
        if conn.get_execution_options().get(dialect.WRITER_OPTION):
            self.writer_commits += 1
        else:
            self.other_commits += 1

    @contextmanager
    def arrival(self) -> Iterator[None]:
        before = dict(STATS)
        self.on = True
        try:
            yield
        finally:
            self.on = False
            self.prepared += STATS["statements"] - before["statements"]
            self.savepoints += STATS["savepoints"] - before["savepoints"]
            self.pipelined_begins += STATS["pipelined_begins"] - before["pipelined_begins"]
            self.piggybacked += STATS["piggybacked"] - before["piggybacked"]
            self.arrivals += 1

    def per_arrival(self) -> dict[str, float]:
        n = max(self.arrivals, 1)
        statements = self.statements + self.prepared
        figures = {
            "statements": statements / n,
            "commits (writer transactions)": self.writer_commits / n,
            "commits (other transactions)": self.other_commits / n,
            "savepoints": self.savepoints / n,
        }
        if self.pg:
            # psycopg sends BEGIN before a transaction's first statement and COMMIT at its end,
            # each a round trip of its own, except a BEGIN pipelined with the first statement;
            # a statement is a round trip unless it went in one pipeline with another statement
            # or with the COMMIT (`core.store.prepared`); SAVEPOINTs are statements counted.
            commits = self.writer_commits + self.other_commits
            begins = self.begins - self.pipelined_begins
            own = statements - self.piggybacked
            figures["round trips"] = (own + begins + commits) / n
        return figures

    def close(self) -> None:
        for name, fn in self._listeners:
            sa.event.remove(self.engine, name, fn)


# -- laneway -----------------------------------------------------------------------------------


def bench_laneway(url: str, seconds: float, tasks: int, counted: int) -> dict[str, Any]:
    with open_host(url) as host:
        loop = OfficeLoop(host, tasks, reviewers=SEATS)
        for i in range(min(100, counted)):
            loop.to_review(i)
            loop.to_work(i)
        review_time = 0.0
        reviews = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(16):
                began = time.perf_counter()
                loop.to_review(reviews)
                review_time += time.perf_counter() - began
                loop.to_work(reviews)
                reviews += 1
        counter = Counter(host.store.engine)
        runs_before = len(host.runs.list())
        for i in range(counted):
            with counter.arrival():
                loop.to_review(i)
            loop.to_work(i)
        counter.close()
        runs = len(host.runs.list()) - runs_before
    if runs != counted * SEATS:
        raise SystemExit(f"counted pass queued {runs} runs, expected {counted * SEATS}")
    return {
        "rate": reviews / review_time,
        "arrivals": reviews,
        "per_arrival": counter.per_arrival(),
    }


# -- PostgreSQL databases of our own -------------------------------------------------------------


@contextmanager
def pg_databases(base_url: str | None, *names: str) -> Iterator[list[str] | None]:
    if not base_url:
        yield None
        return
    admin = sa.create_engine(
        dialect.normalise_url(base_url).set(database="postgres"), isolation_level="AUTOCOMMIT"
    )
    made = [f"{name}_{os.getpid()}" for name in names]
    try:
        with admin.connect() as conn:
            for name in made:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
        root = base_url.rsplit("/", 1)[0]
        yield [f"{root}/{name}" for name in made]
    finally:
        with admin.connect() as conn:
            for name in made:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


# -- the report ----------------------------------------------------------------------------------


def _row(label: str, value: str, target: str = "", verdict: str = "") -> str:
    return f"  {label:<52} {value:>12}  {target:>8}  {verdict}"


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="timed seconds per figure")
    parser.add_argument("--tasks", type=int, default=100, help="tasks cycled through")
    parser.add_argument("--counted", type=int, default=100, help="arrivals in counted passes")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("LANEWAY_TEST_PG_URL"),
        help="a PostgreSQL server to create scratch databases on (default LANEWAY_TEST_PG_URL)",
    )
    parser.add_argument("--dbos-child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dbos_child:
        _dbos_child(args.dbos_child, float(os.environ.get("BENCH_SECONDS", args.seconds)))
        return 0

    failures = 0

    def check(label: str, value: float, fmt: str, target: str, passed: bool) -> str:
        nonlocal failures
        failures += not passed
        return _row(label, format(value, fmt), target, _verdict(passed))

    print(f"Office Review arrivals: {args.seconds:g} s per timed figure, {args.tasks} tasks")
    with (
        tempfile.TemporaryDirectory(prefix="laneway-bench-") as tmp,
        pg_databases(args.pg_url, "laneway_bench_arrival", "laneway_bench_dbos") as pg,
    ):
        base = Path(tmp)
        raw = bench_raw(base / "raw.db", args.seconds, args.tasks)
        dbos_sqlite = bench_dbos(f"sqlite:///{base / 'dbos.sqlite'}", args.seconds)
        sqlite = bench_laneway(
            f"sqlite:///{base / 'board.db'}", args.seconds, args.tasks, args.counted
        )
        dbos_pg = postgres = None
        if pg is not None:
            dbos_pg = bench_dbos(pg[1], args.seconds)
            postgres = bench_laneway(pg[0], args.seconds, args.tasks, args.counted)

    lines = [
        "",
        _row("figure", "value", "target", ""),
        _row("-" * 52, "-" * 12, "-" * 8),
        _row("raw sqlite3 UPDATE+INSERT transactions/s", f"{raw:,.0f}"),
    ]
    sections: list[tuple[str, dict[str, Any], dict[str, Any] | None, float]] = [
        ("SQLite", sqlite, dbos_sqlite, TARGET_DBOS_SQLITE)
    ]
    if postgres is not None and dbos_pg is not None:
        sections.append(("PostgreSQL", postgres, dbos_pg, TARGET_DBOS_PG))
    for name, lane, dbos_result, dbos_target in sections:
        per = lane["per_arrival"]
        lines.append(_row(f"{name}: laneway Office Review arrivals/s", f"{lane['rate']:,.0f}"))
        if name == "SQLite":
            lines.append(
                check(
                    "  arrival / raw sqlite3 txn",
                    lane["rate"] / raw,
                    ".3f",
                    f">= {TARGET_RAW_RATIO}",
                    lane["rate"] / raw >= TARGET_RAW_RATIO,
                )
            )
        if dbos_result is not None and "rate" in dbos_result:
            lines.append(_row(f"{name}: DBOS 3-step workflows/s", f"{dbos_result['rate']:,.0f}"))
            ratio = lane["rate"] / dbos_result["rate"]
            lines.append(
                check(
                    "  arrival / DBOS workflow",
                    ratio,
                    ".2f",
                    f">= {dbos_target:g}x",
                    ratio >= dbos_target,
                )
            )
        elif dbos_result is not None:
            failures += 1
            lines.append(_row(f"{name}: DBOS 3-step workflow", "not measured", "", "FAIL"))
            lines.append(f"      {dbos_result['error']}")
        commits = per["commits (writer transactions)"] + per["commits (other transactions)"]
        lines.append(
            check(
                "  commits per arrival",
                commits,
                ".2f",
                f"<= {TARGET_COMMITS}",
                commits <= TARGET_COMMITS,
            )
        )
        lines.append(
            check(
                f"  savepoints per arrival ({SEATS} seats)",
                per["savepoints"],
                ".2f",
                "< 1/seat",
                per["savepoints"] < SEATS,
            )
        )
        lines.append(_row("  statements per arrival", f"{per['statements']:.2f}"))
        if "round trips" in per:
            lines.append(_row("  round trips per arrival", f"{per['round trips']:.2f}"))
    if pg is None:
        lines.append("  PostgreSQL: not measured (no --pg-url / LANEWAY_TEST_PG_URL)")
    print("\n".join(lines))
    print(f"\n{'all targets met' if failures == 0 else f'{failures} target(s) missed'}")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
