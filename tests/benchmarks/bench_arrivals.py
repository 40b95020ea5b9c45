"""Arrival throughput and recovery-scan benchmark for laneway on SQLite.

    python tests/benchmarks/bench_arrivals.py [--seconds N] [--tasks N] [--profile]

Not a pytest module (its name does not start with `test_`). Every figure runs on a SQLite file
of its own in a temporary directory, in WAL mode with synchronous=NORMAL (laneway's own
pragmas; the raw baseline sets the same ones):

(a) raw sqlite3: one `UPDATE tasks` + `INSERT history` transaction per commit - the ceiling.
(b) laneway manual moves (entry path E2) through `host.tasks.move`, back and forth between two
    steps that declare nothing (no durable kind: no entry record), no WIP limits.
(c) laneway arrivals into the Office Default Review step (clear_decisions + a fan-out to three
    reviewer seats: one entry record, two markers, three runs per arrival). Tasks alternate
    Work -> Review -> Work; the headline rate counts Review arrivals over the time spent in the
    Review moves only, and the round-trip rate (both directions over the whole loop) is shown
    beside it.
(d) the recovery scan, `core.recovery.scan(host)`, over 100,000 terminal entries and 1,000
    non-terminal ones (1,000 tasks standing at Review, each with 100 terminal entries and one
    non-terminal, inserted directly with executemany; no markers: the scan never reads a
    terminal entry's markers). Each task's non-terminal entry is an older entry_seq than its
    newest (seq 50 of 101), so the scan resolves
    all 1,000 as skipped(superseded), closed a run of entries per transaction, no action runs
    (see bench_recovery.py for the same shape at 100x the size). (d2) repeats it
    with the newest entry of each task left non-terminal and unmarked, so all 1,000 are real
    re-dispatches (clear_decisions + a three-run fan-out each).

For (b) and (c) a separate counted pass reports SQL statements and commits per arrival:
statements through SQLAlchemy's `before_cursor_execute` event on `host.store.engine` plus those
laneway runs directly on the DBAPI cursor (`core.store.prepared.STATS`, which that event cannot
see), and commits through the engine's `commit` event, split into the writer connection's
(`host.store`'s single writer) and read transactions on pooled connections.

`--profile` adds a cProfile of (b) and (c): the top 25 of laneway's own functions by
cumulative time, and the top 15 functions overall by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sqlite3
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from core import Host, ids, ledger, recovery  # noqa: E402
from core.plugin.selection import PluginSelection  # noqa: E402
from core.store import dialect  # noqa: E402
from core.store import tables as t  # noqa: E402

try:  # laneway's direct-cursor statements, invisible to SQLAlchemy's cursor events
    from core.store.prepared import STATS as PREPARED_STATS
except ImportError:  # pragma: no cover - an older tree
    PREPARED_STATS = {"statements": 0}

TARGET_B = 0.25
TARGET_C = 0.035
TARGET_SCAN_S = 2.0

TWO_STEPS = """\
version: 1
type: kandev_workflow
workflows:
  - name: Bench
    steps:
      - {name: Left, position: 0, is_start_step: true}
      - {name: Right, position: 1}
"""


def open_host(url: str, **kwargs: Any) -> Host:
    """A host with exactly the built-in plugins."""
    selection = PluginSelection(allow=frozenset({"kanban", "office"}))
    return Host.open(url, plugins=selection, **kwargs)


def timed(seconds: float, step: Callable[[int], None]) -> tuple[int, float]:
    """Call step(0), step(1), ... until `seconds` have passed: (calls, elapsed)."""
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        step(done)
        done += 1
        if done % 16 == 0 and time.perf_counter() >= deadline:
            break
    return done, time.perf_counter() - start


# -- (a) the raw ceiling ----------------------------------------------------------------------


def bench_raw(path: Path, seconds: float, tasks: int) -> float:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute(
        "CREATE TABLE tasks (id TEXT PRIMARY KEY, workflow_step_id TEXT, state TEXT, "
        "updated_at TEXT)"
    )
    con.execute("CREATE INDEX ix_tasks_step ON tasks (workflow_step_id)")
    con.execute(
        "CREATE TABLE history (id TEXT PRIMARY KEY, task_id TEXT, from_step_id TEXT, "
        "to_step_id TEXT, created_at TEXT)"
    )
    task_ids = [f"task-{i}" for i in range(tasks)]
    con.execute("BEGIN")
    con.executemany(
        "INSERT INTO tasks VALUES (?, 'left', 'TODO', '')", [(task,) for task in task_ids]
    )
    con.execute("COMMIT")
    where = dict.fromkeys(task_ids, "left")

    def step(i: int) -> None:
        task = task_ids[i % tasks]
        source = where[task]
        target = "right" if source == "left" else "left"
        stamp = ids.now()
        con.execute("BEGIN")
        con.execute(
            "UPDATE tasks SET workflow_step_id = ?, updated_at = ? WHERE id = ?",
            (target, stamp, task),
        )
        con.execute(
            "INSERT INTO history VALUES (?, ?, ?, ?, ?)",
            (ids.new_id(), task, source, target, stamp),
        )
        con.execute("COMMIT")
        where[task] = target

    done, elapsed = timed(seconds, step)
    con.close()
    return done / elapsed


# -- counting statements and commits ---------------------------------------------------------


class Counter:
    """SQL statements and commits on one engine while `counting` is on."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.counting = False
        self.statements = 0
        self.prepared = 0
        self.writer_commits = 0
        self.read_commits = 0
        self.arrivals = 0
        sa.event.listen(engine, "before_cursor_execute", self._statement)
        sa.event.listen(engine, "commit", self._commit)

    def _statement(self, *_args: Any) -> None:
        if self.counting:
            self.statements += 1

    def _commit(self, conn: sa.Connection) -> None:
        if self.counting:
            if conn.get_execution_options().get(dialect.WRITER_OPTION):
                self.writer_commits += 1
            else:
                self.read_commits += 1

    @contextmanager
    def arrival(self) -> Iterator[None]:
        before = PREPARED_STATS["statements"]
        self.counting = True
        try:
            yield
        finally:
            self.counting = False
            self.prepared += PREPARED_STATS["statements"] - before
            self.arrivals += 1

    def per_arrival(self) -> dict[str, float]:
        n = max(self.arrivals, 1)
        return {
            "statements (SQLAlchemy events)": self.statements / n,
            "statements (direct cursor)": self.prepared / n,
            "statements (total)": (self.statements + self.prepared) / n,
            "commits (writer)": self.writer_commits / n,
            "commits (read transactions)": self.read_commits / n,
        }

    def close(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._statement)
        sa.event.remove(self.engine, "commit", self._commit)


# -- (b) manual moves without a durable kind ---------------------------------------------------


class ManualMoves:
    def __init__(self, host: Host, directory: Path, tasks: int) -> None:
        source = directory / "two-steps.yml"
        source.write_text(TWO_STEPS)
        (workflow,) = host.workflows.import_file(source)
        self.host = host
        self.tasks = [
            host.tasks.create(workflow=workflow.id, title=f"b{i}").id for i in range(tasks)
        ]
        self.at = dict.fromkeys(self.tasks, "Left")

    def move(self, i: int) -> None:
        task = self.tasks[i % len(self.tasks)]
        target = "Right" if self.at[task] == "Left" else "Left"
        self.host.tasks.move(task, target)
        self.at[task] = target


def bench_manual(path: Path, seconds: float, tasks: int, counted: int) -> dict[str, Any]:
    with open_host(f"sqlite:///{path}") as host:
        moves = ManualMoves(host, path.parent, tasks)
        for i in range(min(200, counted)):  # warm caches (prepared statements, workflows)
            moves.move(i)
        done, elapsed = timed(seconds, moves.move)
        counter = Counter(host.store.engine)
        for i in range(counted):
            with counter.arrival():
                moves.move(i)
        counter.close()
    return {"rate": done / elapsed, "arrivals": done, "per_arrival": counter.per_arrival()}


# -- (c) arrivals into Office Review --------------------------------------------------------------


class OfficeLoop:
    def __init__(self, host: Host, tasks: int, reviewers: int = 3) -> None:
        workflow = host.workflows.create_from_template("office-default")
        for r in range(reviewers):
            profile = host.profiles.add(f"bench-reviewer-{r}", command=["true"])
            host.participants.add(
                step="Review", role="reviewer", profile=profile.id, workflow=workflow.id
            )
        self.host = host
        self.workflow = workflow
        self.tasks = [
            host.tasks.create(workflow=workflow.id, title=f"c{i}").id for i in range(tasks)
        ]

    def to_review(self, i: int) -> None:
        self.host.tasks.move(self.tasks[i % len(self.tasks)], "Review")

    def to_work(self, i: int) -> None:
        self.host.tasks.move(self.tasks[i % len(self.tasks)], "Work")


def bench_office(path: Path, seconds: float, tasks: int, counted: int) -> dict[str, Any]:
    with open_host(f"sqlite:///{path}") as host:
        loop = OfficeLoop(host, tasks)
        for i in range(min(100, counted)):
            loop.to_review(i)
            loop.to_work(i)
        review_time = 0.0
        reviews = 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            for _ in range(16):
                began = time.perf_counter()
                loop.to_review(reviews)
                review_time += time.perf_counter() - began
                loop.to_work(reviews)
                reviews += 1
        total = time.perf_counter() - start
        counter = Counter(host.store.engine)
        for i in range(counted):
            with counter.arrival():
                loop.to_review(i)
            loop.to_work(i)
        counter.close()
        runs = len(host.runs.list())
    return {
        "rate": reviews / review_time,
        "round_trip_rate": 2 * reviews / total,
        "arrivals": reviews,
        "runs": runs,
        "per_arrival": counter.per_arrival(),
    }


# -- (d) the recovery scan ----------------------------------------------------------------------


def _scan_fixture(
    path: Path, tasks: int, terminal: int, pending_seq: int
) -> tuple[Host, dict[str, Any]]:
    """A host (not yet scanned) over `tasks` tasks at Review with `terminal` + 1 entries each:
    the one numbered `pending_seq` non-terminal, the others terminal."""
    host = open_host(f"sqlite:///{path}", recover=False)
    loop = OfficeLoop(host, 0)
    review = host.workflows.step(loop.workflow, "Review")
    digest = ledger.declaration_digest(review.actions("on_enter"))
    made = time.perf_counter()
    task_ids = [
        host.tasks.create(workflow=loop.workflow.id, title=f"d{i}", step="Review").id
        for i in range(tasks)
    ]
    stamp = ids.now()
    rows = [
        {
            "id": ids.new_id(),
            "task_id": task,
            "step_id": review.id,
            "entry_seq": seq,
            "entry_path": "E2",
            "declaration_digest": digest,
            "terminal": seq != pending_seq,
            "created_at": stamp,
        }
        for task in task_ids
        for seq in range(1, terminal + 2)
    ]
    with host.store.transaction() as uow:
        uow.conn.execute(sa.insert(t.step_entries), rows)
    return host, {"rows": len(rows), "setup_s": time.perf_counter() - made}


def _plan(host: Host) -> list[str]:
    engine = host.store.engine
    sql = str(
        recovery.pending_query().compile(
            dialect=engine.dialect, compile_kwargs={"literal_binds": True}
        )
    )
    with engine.connect() as conn:
        return [str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]


def bench_scan(path: Path, tasks: int, terminal: int, pending_seq: int) -> dict[str, Any]:
    host, info = _scan_fixture(path, tasks, terminal, pending_seq)
    try:
        began = time.perf_counter()
        with host.store.read() as conn:
            pending = conn.execute(recovery.pending_query()).fetchall()
        query_s = time.perf_counter() - began
        began = time.perf_counter()
        report = recovery.scan(host)
        scan_s = time.perf_counter() - began
        plan = _plan(host)
    finally:
        host.close()
    return {
        **info,
        "pending": len(pending),
        "query_s": query_s,
        "scan_s": scan_s,
        "report": report.as_dict(),
        "plan": plan,
    }


# -- profiles -----------------------------------------------------------------------------------

OWN_CODE = r"/(core|office_plugin|kanban_plugin|plugins)/"


def profile(label: str, setup: Callable[[Host], Callable[[int], None]], path: Path) -> str:
    out = io.StringIO()
    with open_host(f"sqlite:///{path}") as host:
        step = setup(host)
        for i in range(100):
            step(i)
        profiler = cProfile.Profile()
        profiler.enable()
        for i in range(1000):
            step(i)
        profiler.disable()
    out.write(f"\n== profile {label}: 1000 calls ==\n")
    out.write("-- laneway's own functions, by cumulative time (top 25) --\n")
    stats = pstats.Stats(profiler, stream=out).sort_stats("cumulative")
    stats.print_stats(OWN_CODE, 25)
    out.write("-- every function, by own time (top 15) --\n")
    stats.sort_stats("tottime").print_stats(15)
    return out.getvalue()


def _manual_setup(directory: Path, tasks: int) -> Callable[[Host], Callable[[int], None]]:
    def setup(host: Host) -> Callable[[int], None]:
        return ManualMoves(host, directory, tasks).move

    return setup


def _office_setup(tasks: int) -> Callable[[Host], Callable[[int], None]]:
    def setup(host: Host) -> Callable[[int], None]:
        loop = OfficeLoop(host, tasks)

        def step(i: int) -> None:
            loop.to_review(i)
            loop.to_work(i)

        return step

    return setup


# -- the report ---------------------------------------------------------------------------------


def _row(label: str, value: str, target: str = "", verdict: str = "") -> str:
    return f"  {label:<58} {value:>14}  {target:>9}  {verdict}"


def _ok(passed: bool) -> str:
    return "ok" if passed else "MISSED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per figure")
    parser.add_argument("--tasks", type=int, default=100, help="tasks cycled in (a)-(c)")
    parser.add_argument("--counted", type=int, default=200, help="arrivals in counted passes")
    parser.add_argument("--scan-tasks", type=int, default=1000)
    parser.add_argument(
        "--scan-terminal", type=int, default=100, help="terminal entries per scan task"
    )
    parser.add_argument("--no-redispatch-scan", action="store_true", help="skip (d2)")
    parser.add_argument("--profile", action="store_true", help="cProfile (b) and (c)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="laneway-bench-") as tmp:
        base = Path(tmp)
        for name in ("a", "b", "c", "d", "d2", "pb", "pc"):
            (base / name).mkdir()
        print(f"laneway arrival benchmark: {args.seconds:g} s per figure, {args.tasks} tasks")
        raw_rate = bench_raw(base / "a" / "raw.db", args.seconds, args.tasks)
        manual = bench_manual(base / "b" / "board.db", args.seconds, args.tasks, args.counted)
        office = bench_office(base / "c" / "board.db", args.seconds, args.tasks, args.counted)
        terminal, newest = args.scan_terminal, args.scan_terminal + 1
        scan = bench_scan(base / "d" / "board.db", args.scan_tasks, terminal, max(1, newest // 2))
        redispatch = None
        if not args.no_redispatch_scan:
            redispatch = bench_scan(base / "d2" / "board.db", args.scan_tasks, terminal, newest)

        ratio_b = manual["rate"] / raw_rate
        ratio_c = office["rate"] / raw_rate
        lines = [
            "",
            _row("figure", "value", "target", ""),
            _row("-" * 58, "-" * 14, "-" * 9),
            _row("(a) raw sqlite3 UPDATE+INSERT transactions/s", f"{raw_rate:,.0f}"),
            _row("(b) manual moves, no durable kind, arrivals/s", f"{manual['rate']:,.0f}"),
            _row("    (b)/(a)", f"{ratio_b:.3f}", f">= {TARGET_B}", _ok(ratio_b >= TARGET_B)),
        ]
        lines += [
            _row(f"    {k} per arrival", f"{v:.2f}") for k, v in manual["per_arrival"].items()
        ]
        lines += [
            _row("(c) Office Review arrivals/s (Review-move time)", f"{office['rate']:,.0f}"),
            _row("    (c)/(a)", f"{ratio_c:.3f}", f">= {TARGET_C}", _ok(ratio_c >= TARGET_C)),
            _row(
                "    round trip Work->Review->Work, both arrivals/s",
                f"{office['round_trip_rate']:,.0f}",
            ),
        ]
        lines += [
            _row(f"    {k} per Review arrival", f"{v:.2f}")
            for k, v in office["per_arrival"].items()
        ]
        lines += [
            _row(
                f"(d) scan {scan['rows'] - scan['pending']:,} terminal + "
                f"{scan['pending']:,} pending (superseded)",
                f"{scan['scan_s']:.3f} s",
                f"< {TARGET_SCAN_S:g} s",
                _ok(scan["scan_s"] < TARGET_SCAN_S),
            ),
            _row("    of which the pending query", f"{scan['query_s'] * 1000:.1f} ms"),
            f"      report: {scan['report']}",
        ]
        if redispatch is not None:
            lines += [
                _row(
                    f"(d2) scan with {redispatch['pending']:,} real re-dispatches",
                    f"{redispatch['scan_s']:.3f} s",
                    "(info)",
                ),
                f"      report: {redispatch['report']}",
            ]
        lines += ["", "EXPLAIN QUERY PLAN of core.recovery.pending_query():"]
        lines += [f"  {line}" for line in scan["plan"]]
        uses_index = any("ix_step_entries_pending" in line for line in scan["plan"])
        lines += [f"  uses ix_step_entries_pending: {'yes' if uses_index else 'NO'}"]
        print("\n".join(lines))

        if args.profile:
            print(
                profile(
                    "(b) manual move",
                    _manual_setup(base / "pb", args.tasks),
                    base / "pb" / "board.db",
                )
            )
            print(
                profile(
                    "(c) Work->Review->Work", _office_setup(args.tasks), base / "pc" / "board.db"
                )
            )
    print(
        textwrap.dedent(
            """
            Notes: (b) and (c) time the Host API end to end (transition transaction, entry
            dispatch, promotion check). Counted passes run after the timed ones with event
            listeners attached; the timed passes run without them.
            """
        ).strip()
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
