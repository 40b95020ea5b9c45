"""A trivial turn of a live ACP conversation through a worker vs a bare `acp` client loop on the
same agent (issue 45 item 1), on SQLite and PostgreSQL.

    python -m tests.benchmarks.bench_acp_live_turns                 # 5 rounds of 100 turns
    python -m tests.benchmarks.bench_acp_live_turns --rounds 3 --turns 50 --pg URL

The agent is tests/agents/fake_acp_agent.py (it echoes each prompt), one process for the whole
conversation on both sides.

- **floor**: the `agent-client-protocol` package's own client (`acp.spawn_agent_process`), one
  ACP session, `session/prompt` after `session/prompt`, updates dropped.
- **laneway**: what a worker does for each run of one agent on one task: `claim_next`,
  `execute` (the run's prompt with the feedback block, the turn on the live conversation, its
  items and the agent's report written, the run finished), with the worker's one `CancelWatch`. The
  runs are queued before each round (not timed: the producer's cost).

- **rows floor**: the floor's loop that also writes, by hand, the rows a live turn of laneway
  writes, the statements it sends in the transactions it sends them (the list
  `tests/agents/test_issue_45_live_turn_cost.py` pins): the run claimed, its reads, the session
  RUNNING with the prompt item, the agent's message item, the session waiting, the run
  finished, each with its board events - on the board's own database with the plain driver
  (sqlite3, psycopg), as `bench_worker`'s floor writes a run's rows (issue 45 item 4). What
  laneway adds above it is its own code, not its rows: the floor of our own rows the
  developers' guide sets speed targets against.

A round runs the three one after the other, so load hits them alike; the figures are laneway
turns/s over a floor's turns/s and a floor's CPU a turn over laneway's (this process's CPU time:
the client's side of each, the agent's process not counted; steadier than wall time on a
loaded machine), min/median/max over the rounds, with the load average printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block

from core.agents import worker
from core.host import Host
from core.runs import RunRequest
from core.store import dialect
from tests.benchmarks.bench_many_processes import _admin
from tests.benchmarks.bench_worker import FLOOR_CLAIM, SQLITE_FLOOR_CLAIM
from tests.conftest import open_host

FAKE = str(Path(__file__).resolve().parents[1] / "agents" / "fake_acp_agent.py")


class _Quiet:
    async def session_update(self, *_args: Any, **_kwargs: Any) -> None:
        return None


async def _floor(cwd: Path, turns: int, rows: _Rows | None = None) -> tuple[float, float]:
    """The bare loop's turns/s and CPU a turn; with `rows`, the rows floor's."""
    async with spawn_agent_process(
        _Quiet(),  # type: ignore[arg-type]
        sys.executable,
        FAKE,
        cwd=cwd,
    ) as (conn, _process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[text_block("warm up")])
        began, cpu = time.perf_counter(), time.process_time()
        for n in range(turns):
            prompt = f"turn {n}"
            run = rows.begin_turn(prompt) if rows is not None else None
            await conn.prompt(session_id=session.session_id, prompt=[text_block(prompt)])
            if rows is not None and run is not None:
                rows.end_turn(*run, f"done: {prompt}")
        return turns / (time.perf_counter() - began), (time.process_time() - cpu) / turns


class _Rows:
    """A live turn's rows written by hand on the plain driver (see the module's docstring)."""

    def __init__(self, url: str, session: str) -> None:
        self.session = session
        self.pg = url.startswith("postgresql")
        if self.pg:
            import psycopg

            dsn = dialect.normalise_url(url).set(drivername="postgresql")
            dsn_text = dsn.render_as_string(hide_password=False)
            self.conn: Any = psycopg.connect(dsn_text)
            self.reads: Any = psycopg.connect(dsn_text, autocommit=True)
        else:
            import sqlite3

            path = url.removeprefix("sqlite:///")
            self.conn, self.reads = (
                sqlite3.connect(path, isolation_level=None, check_same_thread=False)
                for _ in range(2)
            )
            for conn in (self.conn, self.reads):
                for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=30000"):
                    conn.execute(f"PRAGMA {pragma}")

    def close(self) -> None:
        self.conn.close()
        self.reads.close()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.pg else sql

    def _do(self, sql: str, *params: Any) -> Any:
        return self.conn.execute(self._sql(sql), params)

    def _read(self, sql: str, *params: Any) -> Any:
        return self.reads.execute(self._sql(sql), params).fetchall()

    def _begin(self) -> None:
        if not self.pg:
            self.conn.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        if self.pg:
            self.conn.commit()
        else:
            self.conn.execute("COMMIT")

    def _event(self, type_: str, task: str, **data: Any) -> None:
        self._do(
            "INSERT INTO board_events (type, task_id, at, data, actor) VALUES (?, ?, ?, ?, ?)",
            type_, task, _now(), json.dumps(data), "agent:acp",
        )  # fmt: skip

    def _fence(self, run: str) -> None:
        self._do(
            "UPDATE runs SET claimed_epoch = claimed_epoch WHERE id = ? AND status = 'claimed'"
            " AND claimed_epoch = 'floor'",
            run,
        )

    def _state(self, task: str, state: str) -> None:
        self._do(
            "UPDATE task_sessions SET state = ?, updated_at = ? WHERE id = ? RETURNING task_id",
            state, _now(), self.session,
        ).fetchall()  # fmt: skip
        self._event("session.state", task, session_id=self.session, state=state)

    def _item(self, run: str, kind: str, text: str) -> None:
        self._do(
            "INSERT INTO transcript_items (session_id, seq, run_id, kind, text, data, at)"
            " SELECT ?, coalesce(max(seq), 0) + 1, ?, ?, ?, '{}', ? FROM transcript_items"
            " WHERE session_id = ? RETURNING seq",
            self.session, run, kind, text, _now(), self.session,
        ).fetchall()  # fmt: skip

    def begin_turn(self, prompt: str) -> tuple[str, str]:
        """The run claimed, its reads, the session RUNNING with the prompt: (run, task)."""
        self._begin()
        claim = FLOOR_CLAIM.replace("%(at)s", "?") if self.pg else SQLITE_FLOOR_CLAIM
        run, task, agent = self._do(claim, _now()).fetchone()
        if not self.pg:
            self._do(
                "UPDATE agent_profiles SET claimed_runs = claimed_runs + 1 WHERE id = ?", agent
            )
        self._event("run.started", task, run_id=run, agent_profile_id=agent)
        self._commit()
        self._read("SELECT * FROM tasks WHERE id = ?", task)
        self._read("SELECT * FROM task_sessions WHERE id = ?", self.session)
        self._read(
            "SELECT max(claimed_at) FROM runs WHERE task_id = ? AND agent_profile_id = ?"
            " AND id != ? AND claimed_at IS NOT NULL",
            task, agent, run,
        )  # fmt: skip
        self._read("SELECT catalogue_version FROM board_settings WHERE id = 1")
        self._begin()
        self._state(task, "RUNNING")
        self._fence(run)
        self._item(run, "prompt", prompt)
        self._event("agent.item", task, session_id=self.session, run_id=run, kind="prompt")
        self._commit()
        self.agent = agent
        return run, task

    def end_turn(self, run: str, task: str, message: str) -> None:
        """The agent's message kept, the session waiting, the run finished."""
        self._begin()
        self._read("SELECT task_id FROM task_sessions WHERE id = ?", self.session)
        self._fence(run)
        self._item(run, "message", message)
        self._event("agent.item", task, session_id=self.session, run_id=run, kind="message")
        self._commit()
        self._begin()
        self._fence(run)
        self._state(task, "WAITING_FOR_INPUT")
        self._do("SELECT * FROM tasks WHERE id = ?", task).fetchall()
        self._commit()
        self._begin()
        self._do(
            "UPDATE runs SET status = 'finished', finished_at = ?, session_id = ?"
            " WHERE id = ? AND status = 'claimed' AND claimed_epoch = 'floor'",
            _now(), self.session, run,
        )  # fmt: skip
        self._event("run.finished", task, run_id=run, agent_profile_id=self.agent)
        self._do(
            "UPDATE agent_profiles SET claimed_runs = claimed_runs - 1 WHERE id = ?", self.agent
        )
        self._commit()


def _now() -> str:
    return datetime.now().astimezone().isoformat()


def _board(host: Host, tmp: Path) -> tuple[str, str, str]:
    workflow = tmp / "plain.yml"
    workflow.write_text(
        "id: plain\nname: Plain\nsteps:\n  - id: todo\n"
        "    name: Todo\n    position: 0\n    is_start_step: true\n    prompt: Do it.\n"
    )
    (wf,) = host.workflows.import_file(workflow)
    profile = host.profiles.add("acp", command=[sys.executable, FAKE], protocol="acp")
    task = host.tasks.create(workflow=wf.id, title="bench", description="A trivial task.")
    host.comments.add(task.id, "an old comment, before the agent's first turn", author="alice")
    return profile.id, task.id, str(task.workflow_step_id)


def _queue(host: Host, agent: str, task: str, step: str, n: int) -> None:
    for _ in range(n):
        host.runs.enqueue(
            RunRequest(
                agent_profile_id=agent,
                task_id=task,
                workflow_step_id=step,
                reason="bench",
                coalesce_exempt=True,
            )
        )


def _drain(host: Host, watch: worker.CancelWatch, n: int) -> tuple[float, float]:
    began, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        run = worker.claim_next(host)
        assert run is not None
        outcome = worker.execute(host, run, watch)
        assert outcome.ok, outcome
    return n / (time.perf_counter() - began), (time.process_time() - cpu) / n


Round = tuple[tuple[float, float], tuple[float, float], tuple[float, float]]
"""(laneway turns/s, CPU s a turn), (floor ...), (rows floor ...)"""


def _one_database(url: str, tmp: Path, rounds: int, turns: int) -> list[Round]:
    got: list[Round] = []
    with open_host(url) as host:
        agent, task, step = _board(host, tmp)
        watch = worker.CancelWatch(host)
        with contextlib.closing(watch):
            _queue(host, agent, task, step, 2)
            _drain(host, watch, 2)  # the agent's start and the first run's whole block
            live = host.sessions.live(task)
            assert live is not None
            rows = _Rows(url, live.id)
            try:
                for _ in range(rounds):
                    floor = asyncio.run(_floor(tmp, turns))
                    _queue(host, agent, task, step, turns)
                    by_hand = asyncio.run(_floor(tmp, turns, rows))
                    _queue(host, agent, task, step, turns)
                    ours = _drain(host, watch, turns)
                    got.append((ours, floor, by_hand))
            finally:
                rows.close()
        host.runtime.close()
    return got


def _report(db: str, got: list[Round], turns: int) -> None:
    def spread(values: list[float]) -> str:
        return f"min {min(values):.3f} median {statistics.median(values):.3f} max {max(values):.3f}"

    def side(n: int) -> str:
        return (
            f"{statistics.median(r[n][0] for r in got):7.1f} turns/s "
            f"({statistics.median(r[n][1] for r in got) * 1000:.2f} ms CPU a turn)"
        )

    print(
        f"{db:10s} laneway {side(0)}  floor {side(1)}  rows floor {side(2)}\n"
        f"{'':10s} / floor: turns/s {spread([r[0][0] / r[1][0] for r in got])};"
        f"  CPU floor/laneway {spread([r[1][1] / r[0][1] for r in got])}\n"
        f"{'':10s} / rows floor: turns/s {spread([r[0][0] / r[2][0] for r in got])};"
        f"  CPU rows floor/laneway {spread([r[2][1] / r[0][1] for r in got])}\n"
        f"{'':10s} ({len(got)} rounds of {turns} turns; load {os.getloadavg()[0]:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=100, help="turns per side and round")
    parser.add_argument("--pg", default=os.environ.get("LANEWAY_BENCH_PG_URL")
                        or os.environ.get("LANEWAY_TEST_PG_URL"))  # fmt: skip
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.only != "postgresql":
            got = _one_database(f"sqlite:///{tmp}/board.db", tmp, args.rounds, args.turns)
            _report("SQLite", got, args.turns)
        if args.pg and args.only != "sqlite":
            name = f"laneway_bench_live_{os.getpid()}"
            with _admin(args.pg) as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
            try:
                url = args.pg.rsplit("/", 1)[0] + f"/{name}"
                _report("PostgreSQL", _one_database(url, tmp, args.rounds, args.turns), args.turns)
            finally:
                with _admin(args.pg) as conn:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    main()
