"""The worker at speed (issue 30): laneway workers beside Procrastinate workers, one run.

    python -m tests.benchmarks.bench_worker [--runs N] [--repeat R] [--pg URL] [--profile DIR]

Not a pytest module. N runs (default 240) are queued on tasks of a two-step workflow, each for
an exec agent profile whose command is `/bin/true` (the `sleep` variant: `/bin/sleep 0.05`),
and drained by real `laneway worker --once --concurrency C` processes (P of them, started
together) in the configurations P x C = 1x1, 1x4, 4x1, 4x4; runs/s from the first claim to the
last finish (`claimed_at` / `finished_at` of the runs; start-up excluded). On SQLite (a file in
a temporary directory) and on PostgreSQL (a fresh database on the server of `--pg`, else
LANEWAY_BENCH_PG_URL, else LANEWAY_TEST_PG_URL).

Beside them, interleaved round by round on the same server (a database of its own),
Procrastinate workers (`procrastinate worker --one-shot --concurrency C`, P processes) drain N
jobs of a task that starts the same command with `subprocess` the way laneway starts an exec
agent (prompt on stdin, stdout and stderr read, a session of its own); jobs/s from the first
`started` event to the last `succeeded` one (`procrastinate_events`). Every figure is the
median of `--repeat` rounds (default 3); a round runs every configuration once, laneway and
Procrastinate alternating, so load on the shared machine hits both alike.

Round trips per run (PostgreSQL): one more 1x1 drain whose worker process runs with the
counters of `bench_office_arrival` installed on every engine (SQLAlchemy's cursor, begin and
commit events, plus `core.store.prepared.STATS` for the statements laneway runs on the driver's
cursor), counted over the worker loop (`core.agents.worker._work`: every thread of the process, the
final empty claim included) and divided by the runs it claimed. `--statements` prints the
distinct statements of that drain, the list docs/performance.md holds.

`--profile DIR` writes `DIR/worker-<db>.prof` (cProfile) of one 1x1 worker: the run threads'
`execute` and the loop's claims, merged.

The floor (`floor_drain`, PostgreSQL): the same rows of one run written by hand with psycopg,
one run at a time, in the same transactions, each round beside the 1x1 drains. On SQLite
(`sqlite_floor_drain`, issue 45 item 4): the same rows with the sqlite3 module, measured right
after each round's 1x1 drain; laneway / floor is printed as min / median / max over the rounds
with the load (target: median >= 0.5). Round trips (statements, transactions) are counted on
both databases.

Targets (issue 30): 1x1 laneway / Procrastinate >= 0.8 on PostgreSQL, SQLite 1x1 >= PostgreSQL
1x1; on PostgreSQL 4x1 / 1x1 >= 2.5 with the sleep agent and >= 1.0 with `/bin/true`. Exits 1
when one is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from core import Features, Host  # noqa: E402
from core.agents.protocols.exec_process import _launcher  # noqa: E402
from core.plugin.selection import PluginSelection  # noqa: E402
from core.runs import RunRequest  # noqa: E402
from core.store import tables as t  # noqa: E402
from tests.benchmarks.bench_many_processes import (  # noqa: E402
    _admin,
    _drop_fresh,
    _fresh_url,
    _import_plain,
)

SELECTION = PluginSelection(allow=frozenset({"kanban", "office"}))
LANEWAY = str(Path(sys.executable).with_name("laneway"))
PROCRASTINATE = str(Path(sys.executable).with_name("procrastinate"))
CONFIGS = ((1, 1), (1, 4), (4, 1), (4, 4))
AGENTS = {"true": ["/bin/true"], "sleep": ["/bin/sleep", "0.05"]}
SLEEP_CONFIGS = ((1, 1), (4, 1))
ENV = {**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office", "PYTHONPATH": str(REPO)}

# -- Procrastinate: the app its worker processes import (`--app tests.benchmarks.bench_worker.app`)

PQ_DSN = "LANEWAY_BENCH_PQ_DSN"


FLOOR_AGENT = [_launcher(tuple(AGENTS["true"]), os.environ, None)]
"""The floors' agent, started through the launcher a laneway worker starts it through (Linux:
`setpriv --pdeathsig KILL`, so that the agent dies with its worker): an exec more than the
bare command, ~0.8 ms on the 2-core machine, which the floor of a run's own work pays as
laneway does (`--bare-floor-agent`: the bare command, as before). Procrastinate's task starts
the bare command (issue 30's comparison)."""


def start_agent(command: list[str], prompt: str) -> None:
    """As core.agents.protocols.exec_process starts an exec agent: prompt on stdin, output
    read, a session of its own (the Procrastinate task and the floor start their agents so)."""
    subprocess.run(
        command, input=prompt, capture_output=True, text=True, start_new_session=True, check=True
    )


def _procrastinate_app() -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ[PQ_DSN]))

    @app.task(name="agent")
    def agent(command: list[str], prompt: str) -> None:
        start_agent(command, prompt)

    return app


app = _procrastinate_app() if PQ_DSN in os.environ else None


def _pq_prepare(pg: str) -> str:
    """A fresh database with Procrastinate's schema; its DSN."""
    name = f"laneway_bench_pq_{os.getpid()}"
    with _admin(pg) as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    dsn = pg.rsplit("/", 1)[0] + f"/{name}"
    subprocess.run(
        [PROCRASTINATE, "--app", "tests.benchmarks.bench_worker.app", "schema", "--apply"],
        env={**ENV, PQ_DSN: dsn},
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return dsn


def pq_drain(dsn: str, count: int, processes: int, concurrency: int, command: list[str]) -> float:
    """Jobs/s drained by `processes` Procrastinate workers of `concurrency` each."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE procrastinate_events, procrastinate_jobs CASCADE")
        args = json.dumps({"command": command, "prompt": "bench prompt\n"})
        conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status) "
            "SELECT 'default', 'agent', %s::jsonb, 'todo' FROM generate_series(1, %s)",
            (args, count),
        )
        conn.execute("ANALYZE procrastinate_jobs")
    workers = [
        subprocess.Popen(
            [PROCRASTINATE, "--app", "tests.benchmarks.bench_worker.app", "worker",
             "--one-shot", "--concurrency", str(concurrency), "--no-listen-notify"],
            env={**ENV, PQ_DSN: dsn},
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]  # fmt: skip
    for proc in workers:
        proc.wait()
    with psycopg.connect(dsn) as conn:
        first, last = conn.execute(
            "SELECT min(at) FILTER (WHERE type = 'started'), "
            "max(at) FILTER (WHERE type = 'succeeded') FROM procrastinate_events"
        ).fetchone() or (None, None)
        done = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        ).fetchone()
    assert done is not None
    assert done[0] == count, f"{done[0]} of {count} jobs succeeded"
    assert first is not None
    assert last is not None
    return count / (last - first).total_seconds()


# -- laneway ---------------------------------------------------------------------------------------


class Board:
    """One database with the plain workflow and one profile per agent command; queues rounds
    of runs, each on tasks of its own (a fresh session per run, as on a board of many tasks)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.round = 0
        with Host.open(url, features=Features(office=True), plugins=SELECTION) as host:
            self.workflow = _import_plain(host).id
            self.agents = {
                name: host.profiles.add(name, command=command, max_concurrent_sessions=64).id
                for name, command in AGENTS.items()
            }

    def queue(self, agent: str, count: int) -> str:
        self.round += 1
        reason = f"bench{self.round}"
        with Host.open(self.url, features=Features(office=True), plugins=SELECTION) as host:
            for i in range(count):
                task = host.tasks.create(workflow=self.workflow, title=f"r{self.round} t{i}")
                host.runs.enqueue(
                    RunRequest(
                        self.agents[agent],
                        task.id,
                        task.workflow_step_id,
                        reason,
                        coalesce_exempt=True,
                    )
                )
            if not host.store.is_sqlite:
                with host.store.engine.connect() as conn:
                    conn.exec_driver_sql("ANALYZE")
                    conn.commit()
        return reason

    def drain(
        self,
        agent: str,
        count: int,
        processes: int,
        concurrency: int,
        wrap: list[str] | None = None,
    ) -> float:
        reason = self.queue(agent, count)
        command = [LANEWAY] if wrap is None else [sys.executable, "-c", WRAPPER, *wrap]
        workers = [
            subprocess.Popen(
                [*command, "--db", self.url, "--json", "worker", "--once",
                 "--concurrency", str(concurrency)],
                env=ENV,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(processes)
        ]  # fmt: skip
        for proc in workers:
            assert proc.wait() == 0, f"worker exited {proc.returncode}"
        R = t.runs
        engine = sa.create_engine(self.url.replace("postgresql://", "postgresql+psycopg://", 1))
        with engine.connect() as conn:
            first, last, done = conn.execute(
                sa.select(
                    sa.func.min(R.c.claimed_at),
                    sa.func.max(R.c.finished_at),
                    sa.func.count().filter(R.c.status == "finished"),
                ).where(R.c.reason == reason)
            ).one()
        engine.dispose()
        assert done == count, f"{done} of {count} runs finished"
        return (
            count / (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()
        )


# -- the floor: one run's rows written by hand -----------------------------------------------

# The statements of one laneway run (the list `--statements` prints, docs/performance.md), as
# plain SQL on one psycopg connection in the same five transactions and four reads, the agent
# started through laneway's launcher (FLOOR_AGENT): what a run costs when nothing but its own
# rows and its agent's start is paid for. No pipelining, no prepared statements beyond
# psycopg's own: a floor, not a rival.
FLOOR_CLAIM = """
WITH candidate AS (
  SELECT runs.id, runs.agent_profile_id FROM runs
  JOIN agent_profiles ON agent_profiles.id = runs.agent_profile_id
  WHERE runs.status = 'queued'
    AND agent_profiles.claimed_runs < agent_profiles.max_concurrent_sessions
  ORDER BY runs.requested_at, runs.id LIMIT 1
  FOR NO KEY UPDATE OF runs SKIP LOCKED FOR NO KEY UPDATE OF agent_profiles
), bump AS (
  UPDATE agent_profiles SET claimed_runs = claimed_runs + 1
  FROM candidate WHERE agent_profiles.id = candidate.agent_profile_id
)
UPDATE runs SET status = 'claimed', claimed_at = %(at)s, claimed_epoch = 'floor',
  attempts = attempts + 1
FROM candidate WHERE runs.id = candidate.id
RETURNING runs.id, runs.task_id, runs.agent_profile_id
"""
FLOOR_EVENT = "INSERT INTO board_events (type, task_id, at, data) VALUES (%s, %s, %s, %s)"
FLOOR_FENCE = (
    "UPDATE runs SET claimed_epoch = claimed_epoch WHERE id = %s AND status = 'claimed' "
    "AND claimed_epoch = 'floor'"
)


def floor_drain(url: str, count: int) -> float:
    """Runs/s of the hand-written run (see FLOOR_CLAIM) over `count` queued runs, one at a time."""
    import psycopg

    def now() -> str:
        return datetime.now().astimezone().isoformat()

    def event(cur: Any, type_: str, task: str, **data: Any) -> None:
        cur.execute(FLOOR_EVENT, (type_, task, now(), json.dumps(data)))

    def state(cur: Any, task: str, session: str, value: str) -> None:
        cur.execute(
            "UPDATE task_sessions SET state = %s, updated_at = %s WHERE id = %s RETURNING task_id",
            (value, now(), session),
        ).fetchone()
        event(cur, "session.state", task, session_id=session, state=value)

    first = last = None
    dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn) as conn, psycopg.connect(dsn, autocommit=True) as reads:
        for _ in range(count):
            cur = conn.cursor()
            at = now()
            found = cur.execute(FLOOR_CLAIM, {"at": at}).fetchone()
            assert found is not None, "the floor found no queued run"
            run, task, agent = found
            event(cur, "run.started", task, run_id=run, agent_profile_id=agent)
            conn.commit()
            first = first or at
            reads.execute("SELECT * FROM tasks WHERE id = %s", (task,)).fetchone()
            reads.execute("SELECT * FROM task_sessions WHERE task_id = %s", (task,)).fetchall()
            reads.execute(
                "SELECT max(claimed_at) FROM runs WHERE task_id = %s AND agent_profile_id = %s"
                " AND id != %s AND claimed_at IS NOT NULL",
                (task, agent, run),
            ).fetchone()
            reads.execute("SELECT * FROM agent_profiles WHERE id = %s", (agent,)).fetchone()
            session = f"floor-{run}"
            cur.execute("UPDATE task_sessions SET is_primary = false WHERE task_id = %s", (task,))
            cur.execute(
                "INSERT INTO task_sessions (id, task_id, agent_profile_id, state, is_primary,"
                " external, metadata, started_at, updated_at, agent) VALUES"
                " (%s, %s, %s, 'WAITING_FOR_INPUT', true, false, '{}', %s, %s, '{}') RETURNING *",
                (session, task, agent, now(), now()),
            ).fetchone()
            event(cur, "session.state", task, session_id=session, state="WAITING_FOR_INPUT")
            conn.commit()
            prompt = "bench prompt\n"
            state(cur, task, session, "RUNNING")
            cur.execute(
                "SELECT task_id FROM task_sessions WHERE id = %s FOR NO KEY UPDATE", (session,)
            ).fetchone()
            cur.execute(FLOOR_FENCE, (run,))
            cur.execute(
                "INSERT INTO transcript_items (session_id, seq, run_id, kind, text, data, at)"
                " SELECT %s, coalesce(max(seq), 0) + 1, %s, 'prompt', %s, '{}', %s"
                " FROM transcript_items WHERE session_id = %s RETURNING seq",
                (session, run, prompt, now(), session),
            ).fetchone()
            event(cur, "agent.item", task, session_id=session, run_id=run, kind="prompt")
            conn.commit()
            start_agent(FLOOR_AGENT[0], prompt)
            cur.execute(
                "SELECT agent FROM task_sessions WHERE id = %s FOR NO KEY UPDATE", (session,)
            ).fetchone()
            cur.execute(
                "UPDATE task_sessions SET agent = %s, updated_at = %s WHERE id = %s RETURNING *",
                (json.dumps({"protocol": "exec"}), now(), session),
            ).fetchone()
            cur.execute(FLOOR_FENCE, (run,))
            state(cur, task, session, "WAITING_FOR_INPUT")
            cur.execute("SELECT * FROM tasks WHERE id = %s", (task,)).fetchone()
            cur.execute("SELECT * FROM task_sessions WHERE id = %s", (session,)).fetchone()
            conn.commit()
            last = now()
            cur.execute(
                "UPDATE runs SET status = 'finished', finished_at = %s, session_id = %s"
                " WHERE id = %s AND status = 'claimed' AND claimed_epoch = 'floor'"
                " RETURNING EXISTS (SELECT 1 FROM permissions WHERE run_id = runs.id"
                " AND state = 'pending')",
                (last, session, run),
            ).fetchone()
            event(cur, "run.finished", task, run_id=run, agent_profile_id=agent)
            cur.execute(
                "UPDATE agent_profiles SET claimed_runs = claimed_runs - 1 WHERE id = %s", (agent,)
            )
            conn.commit()
    assert first is not None
    assert last is not None
    return count / (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()


# The same run's rows on SQLite (issue 45 item 4): plain sqlite3, one connection for the
# writes (BEGIN IMMEDIATE) and one for the reads, WAL and synchronous=NORMAL as laneway sets
# them, the writes in the five transactions and the reads in the four of a laneway run today.
SQLITE_FLOOR_CLAIM = """
UPDATE runs SET status = 'claimed', claimed_at = ?, claimed_epoch = 'floor',
  attempts = attempts + 1
WHERE id = (SELECT runs.id FROM runs
  JOIN agent_profiles ON agent_profiles.id = runs.agent_profile_id
  WHERE runs.status = 'queued'
    AND agent_profiles.claimed_runs < agent_profiles.max_concurrent_sessions
  ORDER BY runs.requested_at, runs.id LIMIT 1) AND status = 'queued'
RETURNING id, task_id, agent_profile_id
"""
SQLITE_FLOOR_FENCE = (
    "UPDATE runs SET claimed_epoch = claimed_epoch WHERE id = ? AND status = 'claimed' "
    "AND claimed_epoch = 'floor'"
)


def sqlite_floor_drain(url: str, count: int) -> float:
    """Runs/s of the hand-written run on SQLite (see SQLITE_FLOOR_CLAIM), one at a time."""
    import sqlite3

    path = url.removeprefix("sqlite:///")

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def now() -> str:
        return datetime.now().astimezone().isoformat()

    def event(cur: Any, type_: str, task: str, **data: Any) -> None:
        cur.execute(
            "INSERT INTO board_events (type, task_id, at, data) VALUES (?, ?, ?, ?)",
            (type_, task, now(), json.dumps(data)),
        )

    def state(cur: Any, task: str, session: str, value: str) -> None:
        cur.execute(
            "UPDATE task_sessions SET state = ?, updated_at = ? WHERE id = ? RETURNING task_id",
            (value, now(), session),
        ).fetchone()
        event(cur, "session.state", task, session_id=session, state=value)

    first = last = None
    conn, reads = connect(), connect()
    try:
        for _ in range(count):
            cur = conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            at = now()
            found = cur.execute(SQLITE_FLOOR_CLAIM, (at,)).fetchone()
            assert found is not None, "the floor found no queued run"
            run, task, agent = found
            cur.execute(
                "UPDATE agent_profiles SET claimed_runs = claimed_runs + 1 WHERE id = ?", (agent,)
            )
            event(cur, "run.started", task, run_id=run, agent_profile_id=agent)
            cur.execute("COMMIT")
            first = first or at
            reads.execute("SELECT * FROM tasks WHERE id = ?", (task,)).fetchone()
            reads.execute("SELECT * FROM task_sessions WHERE task_id = ?", (task,)).fetchall()
            reads.execute(
                "SELECT max(claimed_at) FROM runs WHERE task_id = ? AND agent_profile_id = ?"
                " AND id != ? AND claimed_at IS NOT NULL",
                (task, agent, run),
            ).fetchone()
            reads.execute("SELECT * FROM agent_profiles WHERE id = ?", (agent,)).fetchone()
            session = f"floor-{run}"
            cur.execute("BEGIN IMMEDIATE")
            cur.execute("UPDATE task_sessions SET is_primary = 0 WHERE task_id = ?", (task,))
            cur.execute(
                "INSERT INTO task_sessions (id, task_id, agent_profile_id, state, is_primary,"
                " external, metadata, started_at, updated_at, agent) VALUES"
                " (?, ?, ?, 'WAITING_FOR_INPUT', 1, 0, '{}', ?, ?, '{}') RETURNING *",
                (session, task, agent, now(), now()),
            ).fetchone()
            event(cur, "session.state", task, session_id=session, state="WAITING_FOR_INPUT")
            cur.execute("COMMIT")
            prompt = "bench prompt\n"
            cur.execute("BEGIN IMMEDIATE")
            state(cur, task, session, "RUNNING")
            cur.execute(SQLITE_FLOOR_FENCE, (run,))
            cur.execute(
                "INSERT INTO transcript_items (session_id, seq, run_id, kind, text, data, at)"
                " SELECT ?, coalesce(max(seq), 0) + 1, ?, 'prompt', ?, '{}', ?"
                " FROM transcript_items WHERE session_id = ? RETURNING seq",
                (session, run, prompt, now(), session),
            ).fetchone()
            event(cur, "agent.item", task, session_id=session, run_id=run, kind="prompt")
            cur.execute("COMMIT")
            start_agent(FLOOR_AGENT[0], prompt)
            cur.execute("BEGIN IMMEDIATE")
            cur.execute(
                "UPDATE task_sessions SET agent = ?, updated_at = ? WHERE id = ? RETURNING *",
                (json.dumps({"protocol": "exec"}), now(), session),
            ).fetchone()
            cur.execute(SQLITE_FLOOR_FENCE, (run,))
            state(cur, task, session, "WAITING_FOR_INPUT")
            cur.execute("SELECT * FROM tasks WHERE id = ?", (task,)).fetchone()
            cur.execute("COMMIT")
            last = now()
            cur.execute("BEGIN IMMEDIATE")
            cur.execute(
                "UPDATE runs SET status = 'finished', finished_at = ?, session_id = ?"
                " WHERE id = ? AND status = 'claimed' AND claimed_epoch = 'floor'"
                " RETURNING EXISTS (SELECT 1 FROM permissions WHERE run_id = runs.id"
                " AND state = 'pending')",
                (last, session, run),
            ).fetchone()
            event(cur, "run.finished", task, run_id=run, agent_profile_id=agent)
            cur.execute(
                "UPDATE agent_profiles SET claimed_runs = claimed_runs - 1 WHERE id = ?", (agent,)
            )
            cur.execute("COMMIT")
    finally:
        conn.close()
        reads.close()
    assert first is not None
    assert last is not None
    return count / (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()


# The worker process, counted or profiled: the CLI's own entry point, with counters installed
# on every engine (SQLAlchemy class-level events) and core.agents.worker's loop wrapped.
WRAPPER = textwrap.dedent(
    """
    import cProfile, json, sys, threading
    import sqlalchemy as sa
    from core.agents import worker
    from core.store import dialect
    from core.store.prepared import STATS

    mode, out = sys.argv[1], sys.argv[2]
    sys.argv = ["laneway", *sys.argv[3:]]
    counts = {"statements": 0, "begins": 0, "commits": 0, "pings": 0, "claimed": 0}
    texts = {}
    on = [False]

    def autocommit(conn):
        # laneway's reads on PostgreSQL switch the driver's connection (core.store.database)
        dbapi = conn.connection.dbapi_connection
        return (
            conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
            or bool(getattr(dbapi, "autocommit", False))
        )

    def statement(conn, cursor, text, *rest):
        if on[0]:
            counts["statements"] += 1
            key = " ".join(text.split())[:160]
            texts[key] = texts.get(key, 0) + 1

    def begin(conn):
        if on[0] and not autocommit(conn):
            counts["begins"] += 1

    def commit(conn):
        if on[0] and not autocommit(conn):
            counts["commits"] += 1

    from sqlalchemy.dialects.postgresql._psycopg_common import _PGDialect_common_psycopg as PGD
    do_ping = PGD.do_ping

    def ping(self, dbapi_connection):
        if on[0]:
            counts["pings"] += 1
        return do_ping(self, dbapi_connection)

    from core.store import prepared

    def note(kind, sql):
        if on[0]:
            key = kind + " " + " ".join(sql.split())[:150]
            texts[key] = texts.get(key, 0) + 1

    send, pipelined = prepared._send, prepared._pipelined

    def _send(conn, sql, params, **kwargs):
        note("[prepared]", sql)
        return send(conn, sql, params, **kwargs)

    def _pipelined(dbapi, pending, run, sql, params, scratch=None):
        for item in pending or ():
            note("[deferred]", item.sql)
        return pipelined(dbapi, pending, run, sql, params, scratch)

    if mode == "count":
        prepared._send, prepared._pipelined = _send, _pipelined
        PGD.do_ping = ping
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", statement)
        sa.event.listen(sa.engine.Engine, "begin", begin)
        sa.event.listen(sa.engine.Engine, "commit", commit)

    profiles = {}
    lock = threading.Lock()

    def profiled(fn):
        def call(*args, **kwargs):
            with lock:
                prof = profiles.setdefault(threading.get_ident(), cProfile.Profile())
            prof.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                prof.disable()
        return call

    if mode == "profile":
        worker.execute = profiled(worker.execute)
        worker.claim_next = profiled(worker.claim_next)
        worker.requeue_orphans = profiled(worker.requeue_orphans)

    original = worker._work

    def _work(*args, **kwargs):
        before = dict(STATS)
        on[0] = True
        try:
            summary = original(*args, **kwargs)
        finally:
            on[0] = False
        counts["claimed"] = summary.claimed
        for key in ("statements", "pipelined_begins", "piggybacked"):
            counts["prepared_" + key] = STATS[key] - before[key]
        return summary

    worker._work = _work
    from core.cli.app import main
    try:
        main()
    except SystemExit:
        pass
    if mode == "count":
        with open(out, "w") as f:
            json.dump({"counts": counts, "texts": texts}, f)
    else:
        import pstats
        stats = None
        for prof in profiles.values():
            stats = pstats.Stats(prof) if stats is None else stats.add(prof)
        stats.dump_stats(out)
    """
)


def round_trips(board: Board, count: int, statements: bool) -> dict[str, float]:
    """Per run of one counted 1x1 drain on PostgreSQL (see the module docstring)."""
    out = Path(tempfile.mkdtemp()) / "counts.json"
    board.drain("true", count, 1, 1, wrap=["count", str(out)])
    data = json.loads(out.read_text())
    c = data["counts"]
    n = max(c["claimed"], 1)
    all_statements = c["statements"] + c["prepared_statements"]
    # psycopg sends BEGIN before a transaction's first statement and COMMIT at its end, each a
    # round trip, except a BEGIN pipelined with the first statement; a statement is a round trip
    # unless it went in one pipeline with another or with the COMMIT (core.store.prepared);
    # a pooled connection's checkout pings the server (`pool_pre_ping`, SELECT 1 on the driver's
    # cursor, unseen by the cursor events): counted by wrapping the dialect's do_ping
    pings = c["pings"]
    trips = (
        pings
        + all_statements
        - c["prepared_piggybacked"]
        + c["begins"]
        - c["prepared_pipelined_begins"]
        + c["commits"]
    )
    if statements:
        print(
            "  statements of the counted drain, per run: SQLAlchemy's (no mark), laneway's"
            " prepared driver SQL ([prepared]) and statements deferred into another's round"
            " trip ([deferred]):"
        )
        for text, seen in sorted(data["texts"].items(), key=lambda kv: -kv[1]):
            print(f"    {seen / n:6.2f}/run  {text}")
    return {
        "statements": all_statements / n,
        "transactions": c["commits"] / n,
        "pings": pings / n,
        "round trips": trips / n,
    }


def profile(board: Board, count: int, directory: Path, db: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"worker-{db}.prof"
    board.drain("true", count, 1, 1, wrap=["profile", str(out)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=240, help="runs queued per drain")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each figure the median")
    parser.add_argument("--pg", default=os.environ.get("LANEWAY_BENCH_PG_URL")
                        or os.environ.get("LANEWAY_TEST_PG_URL"))  # fmt: skip
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument("--statements", action="store_true", help="list one run's statements")
    parser.add_argument(
        "--bare-floor-agent",
        action="store_true",
        help="the floors start /bin/true itself, not through laneway's launcher",
    )
    parser.add_argument("--profile", type=Path, metavar="DIR", help="write cProfile output here")
    args = parser.parse_args()
    if args.bare_floor_agent:
        FLOOR_AGENT[0] = AGENTS["true"]
    try:
        sys.exit(_run_all(args))
    finally:
        _drop_fresh()
        if args.pg:
            with _admin(args.pg) as conn:
                conn.exec_driver_sql(
                    f"DROP DATABASE IF EXISTS laneway_bench_pq_{os.getpid()} WITH (FORCE)"
                )


def _run_all(args: argparse.Namespace) -> int:
    dbs = ([] if args.no_sqlite else ["sqlite"]) + (["postgresql"] if args.pg else [])
    boards = {db: Board(_fresh_url(db, args.pg)) for db in dbs}
    pq = _pq_prepare(args.pg) if args.pg else None
    cases = [("true", p, c) for p, c in CONFIGS] + [("sleep", p, c) for p, c in SLEEP_CONFIGS]
    seen: dict[tuple[str, str, int, int], list[float]] = {}
    loads: list[float] = []
    for r in range(args.repeat):
        for agent, p, c in cases:
            for db in dbs:
                seen.setdefault((db, agent, p, c), []).append(
                    boards[db].drain(agent, args.runs, p, c)
                )
            if pq is not None:
                seen.setdefault(("procrastinate", agent, p, c), []).append(
                    pq_drain(pq, args.runs, p, c, AGENTS[agent])
                )
            if "postgresql" in boards and (agent, p, c) == ("true", 1, 1):
                pg = boards["postgresql"]
                pg.queue("true", args.runs)
                seen.setdefault(("floor", agent, p, c), []).append(floor_drain(pg.url, args.runs))
            if "sqlite" in boards and (agent, p, c) == ("true", 1, 1):
                lite = boards["sqlite"]
                lite.queue("true", args.runs)
                floor = sqlite_floor_drain(lite.url, args.runs)
                seen.setdefault(("sqlite floor", agent, p, c), []).append(floor)
                loads.append(os.getloadavg()[0])
        print(f"round {r + 1} of {args.repeat} done", file=sys.stderr, flush=True)
    med = {key: statistics.median(values) for key, values in seen.items()}
    columns = [*(f"laneway {db}" for db in dbs), *(["Procrastinate PG"] if pq else [])]
    names = [*dbs, *(["procrastinate"] if pq else [])]
    print(f"\n{args.runs} runs per drain, median of {args.repeat} rounds (runs/s)\n")
    print("| agent | workers x concurrency | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for agent, p, c in cases:
        cells = " | ".join(f"{med[(n, agent, p, c)]:.1f}" for n in names)
        print(f"| {agent} | {p} x {c} | {cells} |")
    missed = 0

    def check(label: str, value: float, target: float) -> None:
        nonlocal missed
        ok = value >= target
        missed += not ok
        print(f"{label}: {value:.2f} (target >= {target}) {'PASS' if ok else 'FAIL'}")

    print()
    if "postgresql" in dbs and pq:
        pg11 = med[("postgresql", "true", 1, 1)]
        check("1) PG 1x1 laneway / Procrastinate", pg11 / med[("procrastinate", "true", 1, 1)], 0.8)
        floor = med[("floor", "true", 1, 1)]
        print(
            f"   PG 1x1 floor (one run's rows by hand, FLOOR_CLAIM): {floor:.1f} runs/s;"
            f" laneway / floor {pg11 / floor:.2f}, floor / Procrastinate"
            f" {floor / med[('procrastinate', 'true', 1, 1)]:.2f}"
        )
        for p, c in CONFIGS[1:]:
            ratio = med[("postgresql", "true", p, c)] / med[("procrastinate", "true", p, c)]
            print(f"   PG {p}x{c} laneway / Procrastinate: {ratio:.2f}")
        if "sqlite" in dbs:
            check("1) SQLite 1x1 / PG 1x1", med[("sqlite", "true", 1, 1)] / pg11, 1.0)
        check(
            "2) PG sleep 4x1 / 1x1",
            med[("postgresql", "sleep", 4, 1)] / med[("postgresql", "sleep", 1, 1)],
            2.5,
        )
        check("2) PG true 4x1 / 1x1", med[("postgresql", "true", 4, 1)] / pg11, 1.0)
        pq_sleep = med[("procrastinate", "sleep", 4, 1)] / med[("procrastinate", "sleep", 1, 1)]
        pq_true = med[("procrastinate", "true", 4, 1)] / med[("procrastinate", "true", 1, 1)]
        print(f"   Procrastinate 4x1 / 1x1: sleep {pq_sleep:.2f}, true {pq_true:.2f}")
    if "sqlite" in dbs:
        # issue 45 item 4: each round's 1x1 drain against the floor measured right after it
        ratios = sorted(
            lw / fl
            for lw, fl in zip(
                seen[("sqlite", "true", 1, 1)], seen[("sqlite floor", "true", 1, 1)], strict=True
            )
        )
        print(
            f"   SQLite 1x1 floor (one run's rows by hand, SQLITE_FLOOR_CLAIM):"
            f" {med[('sqlite floor', 'true', 1, 1)]:.1f} runs/s; laneway / floor"
            f" min {ratios[0]:.2f} median {statistics.median(ratios):.2f} max {ratios[-1]:.2f}"
            f" (load {min(loads):.1f}-{max(loads):.1f})"
        )
        check("4) SQLite 1x1 laneway / floor (median)", statistics.median(ratios), 0.5)
    for db in dbs:
        trips = round_trips(boards[db], min(args.runs, 100), args.statements)
        print(
            f"3) {db} per run, claim to release: "
            + ", ".join(f"{k} {v:.1f}" for k, v in trips.items())
        )
    if args.profile:
        for db in dbs:
            print(f"profile: {profile(boards[db], args.runs, args.profile, db)}")
    return 1 if missed else 0


if __name__ == "__main__":
    main()
