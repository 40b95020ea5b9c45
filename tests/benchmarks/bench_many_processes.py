"""Many processes, one board: the runs queue and arrivals with several processes at once.

    python -m tests.benchmarks.bench_many_processes [--runs N] [--seconds S] [--pg URL]

Not a pytest module. Each figure runs on a fresh SQLite file in a temporary directory and, when
a PostgreSQL URL is given (`--pg`, else `LANEWAY_BENCH_PG_URL`, else `LANEWAY_TEST_PG_URL`), on
a fresh database on that server too. Every figure is a ratio against a baseline measured in the
same run, because absolute numbers swing about 2x on a shared 2-core machine:

(1) claim cost: the mean time of one claim (`core.runs.claim_next`, one statement, plus its
    release) with 10,000 runs queued, against the same with 100 queued. Target <= 1.5. (On
    PostgreSQL the bulk-loaded queue is ANALYZEd first, as autovacuum does on a live board.)
(2) drain: N runs (default 400) of an agent that reads its prompt and sleeps 50 ms, drained by
    1, 2 and 4 `laneway worker --once` processes (concurrency 1 each); runs/s from the first
    claim to the last finish (start-up excluded). Baseline: 1 process. PostgreSQL target:
    4 processes / 1 process >= 2.5.
(3) arrivals: 1 and 4 processes, each with a host of its own, moving its own 50 tasks back and
    forth between two steps that declare nothing (manual moves, E2) for S seconds (default 5);
    total arrivals/s. Targets: SQLite 4/1 >= 0.8; PostgreSQL 4/1 >= 2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from core import Features, Host, ids, runs  # noqa: E402
from core.plugin.selection import PluginSelection  # noqa: E402
from core.store import tables as t  # noqa: E402

SELECTION = PluginSelection(allow=frozenset({"kanban", "office"}))
LANEWAY = str(Path(sys.executable).with_name("laneway"))
PLAIN = textwrap.dedent(
    """\
    id: plain
    name: Plain
    steps:
      - {id: a, name: A, position: 0, is_start_step: true, allow_manual_move: true}
      - {id: b, name: B, position: 1, allow_manual_move: true}
    """
)


def _open(url: str) -> Host:
    return Host.open(url, features=Features(office=True), plugins=SELECTION)


def _queue(host: Host, agent: str, count: int, task_id: str | None = None) -> None:
    stamp = ids.now()
    rows = [
        {
            "id": ids.new_id(),
            "agent_profile_id": agent,
            "task_id": task_id,
            "workflow_step_id": None,
            "reason": "bench",
            "status": "queued",
            "coalesce_exempt": True,
            "coalesced_count": 1,
            "requested_at": stamp,
        }
        for _ in range(count)
    ]
    with host.store.transaction() as uow:
        uow.conn.execute(sa.insert(t.runs), rows)
    _analyze(host)


def _analyze(host: Host) -> None:
    """Fresh planner statistics after a bulk load, as autovacuum would gather them on a live
    PostgreSQL board (without them the planner takes 10,000 queued runs for 3 and sorts)."""
    if not host.store.is_sqlite:
        with host.store.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE runs")
            conn.exec_driver_sql("ANALYZE agent_profiles")
            conn.commit()


# -- (1) claim cost --------------------------------------------------------------------------------


def claim_cost(url: str, queued: int, claims: int = 50) -> float:
    """Mean seconds per claim + release with `queued` runs waiting."""
    with _open(url) as host:
        agent = host.profiles.add("bench", command=["true"], max_concurrent_sessions=10**6).id
        _queue(host, agent, queued)
        epoch = host.live_epoch()
        times = []
        for _ in range(claims):
            started = time.perf_counter()
            with host.store.transaction() as uow:
                run = runs.claim_next(uow, epoch, "bench")
                assert run is not None
                runs.release(uow, run, epoch, ok=True)
            times.append(time.perf_counter() - started)
    return statistics.mean(times[5:])


# -- (2) drain -------------------------------------------------------------------------------------


def drain(url: str, count: int, processes: int) -> float:
    """Runs/s drained by `processes` worker processes, first claim to last finish."""
    with _open(url) as host:
        wf = _import_plain(host)
        agent = host.profiles.add(
            "sleeper",
            command=["/bin/sh", "-c", "cat >/dev/null; sleep 0.05"],
            max_concurrent_sessions=processes,
        ).id
        tasks = [host.tasks.create(workflow=wf.id, title=f"t{i}").id for i in range(count)]
        stamp = ids.now()
        with host.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.runs),
                [
                    {
                        "id": ids.new_id(),
                        "agent_profile_id": agent,
                        "task_id": task,
                        "workflow_step_id": None,
                        "reason": "bench",
                        "status": "queued",
                        "coalesce_exempt": True,
                        "coalesced_count": 1,
                        "requested_at": stamp,
                    }
                    for task in tasks
                ],
            )
        _analyze(host)
    env = {**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office"}
    workers = [
        subprocess.Popen(
            [LANEWAY, "--db", url, "--json", "worker", "--once", "--concurrency", "1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]
    for proc in workers:
        proc.wait()
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        first, last, done = conn.execute(
            sa.select(
                sa.func.min(t.runs.c.claimed_at),
                sa.func.max(t.runs.c.finished_at),
                sa.func.count(t.runs.c.finished_at),
            )
        ).one()
    engine.dispose()
    assert done == count, f"{done} of {count} runs finished"
    seconds = (_ts(last) - _ts(first)).total_seconds()
    return count / seconds


def _import_plain(host: Host) -> Any:
    path = Path(tempfile.mkdtemp()) / "plain.yml"
    path.write_text(PLAIN)
    (wf,) = host.workflows.import_file(path)
    return wf


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


# -- (3) arrivals ----------------------------------------------------------------------------------

MOVER = textwrap.dedent(
    """
    import sys, time
    from core import Host
    from core.plugin.selection import PluginSelection

    url, first, count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    host = Host.open(url, plugins=PluginSelection(allow=frozenset({"kanban", "office"})))
    tasks = [t.id for t in host.tasks.list()][first:first + count]
    print("ready", flush=True)
    sys.stdin.readline()  # every process starts together
    moves, side, deadline = 0, "B", time.monotonic() + seconds
    while time.monotonic() < deadline:
        for task in tasks:
            host.tasks.move(task, side)
            moves += 1
        side = "A" if side == "B" else "B"
    print(moves, flush=True)
    host.close()
    """
)


def arrivals(url: str, processes: int, seconds: float, per_process: int = 50) -> float:
    """Arrivals/s in all, `processes` processes moving their own tasks at once."""
    with _open(url) as host:
        wf = _import_plain(host)
        for i in range(processes * per_process):
            host.tasks.create(workflow=wf.id, title=f"t{i}")
    env = {**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MOVER, url, str(i * per_process), str(per_process),
             str(seconds)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]  # fmt: skip
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    total = sum(int(p.communicate()[0].strip()) for p in procs)
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=400, help="runs drained in (2)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each (3) figure")
    parser.add_argument("--pg", default=os.environ.get("LANEWAY_BENCH_PG_URL")
                        or os.environ.get("LANEWAY_TEST_PG_URL"))  # fmt: skip
    try:
        _run_all(parser.parse_args())
    finally:
        _drop_fresh()


def _run_all(args: argparse.Namespace) -> None:
    dbs = ["sqlite"] + (["postgresql"] if args.pg else [])
    for db in dbs:
        print(f"\n== {db}")

        def url(db: str = db) -> str:
            return _fresh_url(db, args.pg)

        small, big = claim_cost(url(), 100), claim_cost(url(), 10_000)
        print(
            f"(1) claim + release: {small * 1e3:.2f} ms with 100 queued, "
            f"{big * 1e3:.2f} ms with 10,000 queued: ratio {big / small:.2f} (target <= 1.5)"
        )
        rates = {p: drain(url(), args.runs, p) for p in (1, 2, 4)}
        print(
            f"(2) drain {args.runs} runs: "
            + ", ".join(
                f"{p} worker{'s' if p > 1 else ''} {r:.1f} runs/s" for p, r in rates.items()
            )
            + f"; 2/1 {rates[2] / rates[1]:.2f}, 4/1 {rates[4] / rates[1]:.2f}"
            + (" (target >= 2.5)" if db == "postgresql" else "")
        )
        one, four = arrivals(url(), 1, args.seconds), arrivals(url(), 4, args.seconds)
        target = "0.8" if db == "sqlite" else "2"
        print(
            f"(3) arrivals: 1 process {one:.0f}/s, 4 processes {four:.0f}/s in all: "
            f"4/1 {four / one:.2f} (target >= {target})"
        )


_FRESH: list[tuple[str, str]] = []
_TMP = tempfile.mkdtemp(prefix="laneway-bench-")


def _fresh_url(db: str, pg: str | None) -> str:
    n = len(_FRESH)
    if db == "sqlite":
        url = f"sqlite:///{_TMP}/bench{n}.db"
    else:
        assert pg is not None
        name = f"laneway_bench_{os.getpid()}_{n}"
        with _admin(pg) as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        url = pg.rsplit("/", 1)[0] + f"/{name}"
    _FRESH.append((db, url))
    return url


@contextmanager
def _admin(pg: str) -> Iterator[sa.Connection]:
    engine = sa.create_engine(
        pg.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
    )
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _drop_fresh() -> None:
    import shutil

    for db, url in _FRESH:
        if db == "postgresql":
            base, name = url.rsplit("/", 1)
            with _admin(base + "/postgres") as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    shutil.rmtree(_TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
