"""The event log and `GET /api/events` (HTTP.md, The event stream): the outbox is written in
the changing transaction, ids only grow, every change arrives once and in order whichever
process made it, `Last-Event-ID` resumes without a gap, `?task=` narrows, a `serve` killed
with -9 loses nothing, PostgreSQL wakes the stream by NOTIFY, retention prunes only what is
older than 24 hours."""

from __future__ import annotations

import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from core import ids
from core.store import events, wake
from core.store import tables as t
from tests.conftest import open_host
from tests.serve.conftest import (
    LANEWAY,
    EventReader,
    OfficeBoard,
    Served,
    StreamEvent,
    build_office,
    cli_env,
    laneway,
    start_serve,
)

pytestmark = pytest.mark.slow


def _moves(found: list[StreamEvent], task_id: str) -> list[str]:
    return [
        e.data["to_step_id"]
        for e in found
        if e.type == "task.moved" and e.data["task_id"] == task_id
    ]


def _assert_once_in_order(found: list[StreamEvent]) -> None:
    got = [e.id for e in found]
    assert got == sorted(set(got)), got  # once each, ids growing


# -- the outbox itself --------------------------------------------------------------------------


def test_events_commit_with_their_change_or_not_at_all(db_url: str) -> None:
    """DESIGN 'every change also writes its events in the same transaction': a change rolled
    back leaves no event; a committed one leaves exactly its events, ids growing."""
    with open_host(db_url) as host:
        wf = host.workflows.create_from_template("office-default")
        before = events.read_all(host.store)

        def failing_change() -> None:
            with host.store.transaction() as uow:
                events.record(uow, "task.created", "ghost", workflow_id=wf.id)
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            failing_change()
        assert events.read_all(host.store) == before
        task = host.tasks.create(workflow=wf.id, title="t")
        host.tasks.move(task.id, "Review")
        after = events.read_all(host.store, task_id=task.id)
        assert [e.type for e in after][:2] == ["task.created", "task.moved"]
        assert "entry.marker" in {e.type for e in after}
        ids_ = [e.id for e in after]
        assert ids_ == sorted(ids_)
        moved = after[1]
        assert moved.data["entry_path"] == "E2"
        assert moved.data["to_step_id"] == wf.step("Review").id  # type: ignore[union-attr]
        assert moved.data["queued"] is False
        for e in after:
            assert e.as_json()["at"].endswith("Z")
            assert e.as_json()["task_id"] == task.id


def test_a_failed_savepoint_takes_its_events_with_it(db_url: str) -> None:
    """An isolated block that fails rolls back its statements and its events together."""
    with open_host(db_url) as host:
        start = events.read_all(host.store)
        with host.store.transaction() as uow:
            events.record(uow, "session.state", None, session_id="kept", state="RUNNING")

            def failing_block() -> None:
                with host.store.isolated():
                    if not host.store.is_sqlite:
                        events.record(uow, "session.state", None, session_id="lost", state="FAILED")
                    raise RuntimeError("inner failure")

            with pytest.raises(RuntimeError):
                failing_block()
        added = events.read_all(host.store)[len(start) :]
        assert [e.data["session_id"] for e in added] == ["kept"]


def test_retention_prunes_only_what_is_older_than_a_day(db_url: str) -> None:
    """HTTP.md: retained at least the last 24 hours; pruning takes only older events."""
    with open_host(db_url) as host:
        now = ids.now()
        with host.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.board_events),
                [
                    {
                        "type": "task.created",
                        "task_id": f"old{n}",
                        "at": ids.shift(now, -90_000 - n),
                        "data": "{}",
                    }
                    for n in range(1200)
                ]
                + [
                    {
                        "type": "task.created",
                        "task_id": "recent",
                        "at": ids.shift(now, -80_000),
                        "data": "{}",
                    }
                ],
            )
        removed = events.prune(host.store, older_than=events.RETENTION / 24, now=now)
        assert removed == 1200
        left = events.read_all(host.store)
        assert [e.task_id for e in left] == ["recent"]


# -- the stream ---------------------------------------------------------------------------------


def test_changes_arrive_once_in_order_and_a_reconnect_misses_nothing(
    served: Served, office: OfficeBoard
) -> None:
    """HTTP.md event stream: ids only grow, each event once per connection, in id order;
    `Last-Event-ID: N` replays everything after N, then the live stream."""
    listener = EventReader(served)
    narrow = EventReader(served, task=office.task_id)
    with served.client() as c:
        other = c.post(
            "/api/tasks", json={"workflow": office.workflow_name, "title": "other"}
        ).json()
        for step in ("Review", "Backlog", "Review", "Work"):
            assert (
                c.post(f"/api/tasks/{office.task_id}/move", json={"step": step}).status_code == 200
            )
        got = listener.wait_for(lambda es: len(_moves(es, office.task_id)) == 4)
        _assert_once_in_order(got)
        assert _moves(got, office.task_id) == [
            office.steps[s] for s in ("Review", "Backlog", "Review", "Work")
        ]
        assert any(e.type == "task.created" and e.data["task_id"] == other["id"] for e in got)
        assert any(e.type == "entry.marker" for e in got)
        for e in got:
            assert e.data["type"] == e.type
            assert e.data["id"] == e.id
            assert "at" in e.data
        # ?task= narrows
        narrowed = narrow.wait_for(lambda es: len(_moves(es, office.task_id)) == 4)
        assert {e.data["task_id"] for e in narrowed} == {office.task_id}

        # a reconnect from the middle gets exactly what came after
        middle = got[len(got) // 2].id
        listener.close()
        assert c.post(f"/api/tasks/{office.task_id}/move", json={"step": "Done"}).status_code == 200
        resumed = EventReader(served, last_id=middle)
        everything = resumed.wait_for(
            lambda es: office.steps["Done"] in _moves(es, office.task_id)[-1:]
        )
        _assert_once_in_order(everything)
        assert [e.id for e in everything][: len(got) - len(got) // 2 - 1] == [
            e.id for e in got if e.id > middle
        ]
        assert everything[0].id == middle + 1
    resumed.close()
    narrow.close()


def test_serve_killed_with_minus_nine_and_restarted_loses_no_event(
    office: OfficeBoard, tmp_path: Path
) -> None:
    """HTTP.md: a client resuming with Last-Event-ID after `serve` died (kill -9) and came
    back gets every event, including those other processes made while it was down."""
    served = start_serve(office.db, tmp_path)
    reader = EventReader(served)
    with served.client() as c:
        c.post(f"/api/tasks/{office.task_id}/move", json={"step": "Review"})
    seen = reader.wait_for(lambda es: len(_moves(es, office.task_id)) == 1)
    last = seen[-1].id
    served.proc.send_signal(signal.SIGKILL)
    served.proc.wait()
    reader.close()
    # while it is down, a CLI process changes the board
    laneway(office.db, "task", "move", office.task_id, "Backlog")
    made = laneway(
        office.db, "task", "create", "--workflow", office.workflow_id, "--title", "while down"
    )
    restarted = start_serve(office.db, tmp_path)
    try:
        resumed = EventReader(restarted, last_id=last)
        got = resumed.wait_for(
            lambda es: any(e.type == "task.created" and e.data["task_id"] == made["id"] for e in es)
        )
        _assert_once_in_order(got)
        assert got[0].id == last + 1
        assert _moves(got, office.task_id)[0] == office.steps["Backlog"]
        with open_host(office.db, read_only=True) as host:
            stored = [e.id for e in events.read_all(host.store) if e.id > last]
        assert [e.id for e in got] == stored[: len(got)]
        resumed.close()
    finally:
        assert restarted.stop() == 0


def test_cli_and_worker_processes_changes_arrive_live(office: OfficeBoard, tmp_path: Path) -> None:
    """Issue 13 events: a CLI process and a worker process make changes while a client of a
    (writing) `serve` listens; every change arrives once, in order."""
    served = start_serve(office.db, tmp_path)
    reader = EventReader(served)
    try:
        laneway(office.db, "task", "start", office.task_id)
        worker = subprocess.run(
            [LANEWAY, "--db", office.db, "--json", "worker", "--once", "--max-runs", "3"],
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=120,
            check=False,
        )
        assert worker.returncode == 0, worker.stderr
        with open_host(office.db, read_only=True) as host:
            stored = events.read_all(host.store)
        last_stored = stored[-1].id
        got = reader.wait_for(lambda es: bool(es) and es[-1].id >= last_stored)
        _assert_once_in_order(got)
        first = got[0].id
        assert [e.id for e in got] == [e.id for e in stored if e.id >= first]
        types = {e.type for e in got}
        assert {"task.moved", "run.queued", "run.started", "session.state"} <= types
        assert types & {"run.finished", "run.failed"}
    finally:
        reader.close()
        assert served.stop() == 0


def test_writer_serve_streams_a_concurrent_cli_processes_changes(
    office: OfficeBoard, tmp_path: Path
) -> None:
    """Issue 13 'Many processes, one board': a writing `serve` and a CLI command write the
    same database at once: the CLI's change reaches the stream, and so does one made through
    the API after it, in order."""
    served = start_serve(office.db, tmp_path)
    reader = EventReader(served)
    try:
        laneway(office.db, "task", "move", office.task_id, "Review")
        with served.client() as c:
            assert (
                c.post(f"/api/tasks/{office.task_id}/move", json={"step": "Done"}).status_code
                == 200
            )
        got = reader.wait_for(lambda es: office.steps["Done"] in _moves(es, office.task_id))
        _assert_once_in_order(got)
        assert _moves(got, office.task_id) == [office.steps["Review"], office.steps["Done"]]
    finally:
        reader.close()
        assert served.stop() == 0


@pytest.mark.postgres
def test_postgresql_notify_wakes_the_stream(pg_database: str | None, tmp_path: Path) -> None:
    """HTTP.md: on PostgreSQL a new event wakes the stream at once (LISTEN/NOTIFY): with the
    fallback poll set to a minute, a CLI process's change still arrives in seconds."""
    if pg_database is None:
        pytest.skip("no PostgreSQL server: set LANEWAY_TEST_PG_URL (.ci/run does)")
    from tests.conftest import _reset_postgres

    _reset_postgres(pg_database)
    laneway(pg_database, "init")
    office = build_office(pg_database, tmp_path)
    served = start_serve(pg_database, tmp_path, "--read-only", env={"LANEWAY_SERVE_POLL_S": "60"})
    reader = EventReader(served)
    try:
        time.sleep(1.0)  # the LISTEN connection is up
        started = time.monotonic()
        laneway(pg_database, "task", "move", office.task_id, "Review")
        cli_done = time.monotonic()
        got = reader.wait_for(
            lambda es: office.steps["Review"] in _moves(es, office.task_id), timeout=30
        )
        assert time.monotonic() - cli_done < 30  # far below the 60 s poll: the NOTIFY woke it
        _assert_once_in_order(got)
        assert started < cli_done
    finally:
        reader.close()
        assert served.stop() == 0


@pytest.mark.postgres
def test_concurrent_writer_processes_on_postgresql_stream_every_event_in_id_order(
    pg_database: str | None, tmp_path: Path
) -> None:
    """HTTP.md: ids only grow and a client gets every event once, in order, whichever process
    made it - on PostgreSQL, where concurrent transactions commit in any order, with three CLI
    processes and the API moving tasks at once (the outbox's advisory lock orders the ids)."""
    if pg_database is None:
        pytest.skip("no PostgreSQL server: set LANEWAY_TEST_PG_URL (.ci/run does)")
    from tests.conftest import _reset_postgres

    _reset_postgres(pg_database)
    laneway(pg_database, "init")
    office = build_office(pg_database, tmp_path, extra_tasks=4)
    tasks = [t["id"] for t in laneway(pg_database, "task", "list")]
    served = start_serve(pg_database, tmp_path)
    reader = EventReader(served)
    try:
        writers = []
        for task_id in tasks[1:4]:
            script = " && ".join(
                f"{LANEWAY} --db {pg_database} task move {task_id} {step} >/dev/null"
                for step in ("Review", "Backlog", "Review", "Done")
            )
            writers.append(subprocess.Popen(["sh", "-c", script], env=cli_env()))
        with served.client() as c:
            for step in ("Review", "Backlog", "Review", "Done"):
                answer = c.post(f"/api/tasks/{tasks[0]}/move", json={"step": step})
                assert answer.status_code == 200, answer.text
        for proc in writers:
            assert proc.wait(timeout=180) == 0
        with open_host(pg_database, read_only=True) as host:
            stored = events.read_all(host.store)
        got = reader.wait_for(lambda es: bool(es) and es[-1].id >= stored[-1].id, timeout=30)
        _assert_once_in_order(got)
        assert [e.id for e in got] == [e.id for e in stored if e.id >= got[0].id]
        for task_id in tasks[:4]:
            assert _moves(got, task_id)[-1] == office.steps["Done"]
    finally:
        reader.close()
        assert served.stop() == 0


def test_issue_45_item_3_sqlite_wake_socket_wakes_the_stream(
    office: OfficeBoard, tmp_path: Path
) -> None:
    """Issue 45 item 3: on SQLite, other processes' commits wake the stream through its
    wake-up socket (`core.store.wake`): with the fallback poll set to a minute, the changes of
    two CLI processes arrive in seconds, every event once and in id order, exactly what the
    table holds; serve's socket goes with it."""
    served = start_serve(office.db, tmp_path, "--read-only", env={"LANEWAY_SERVE_POLL_S": "60"})
    reader = EventReader(served)
    board = sa.make_url(office.db).database
    assert board is not None
    where = wake.directory(Path(board))[0]
    try:
        time.sleep(0.5)  # connected: the stream's start is not what is measured
        assert [p for p in where.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)] != []
        laneway(office.db, "task", "move", office.task_id, "Review")
        laneway(office.db, "task", "move", office.task_id, "Backlog")
        cli_done = time.monotonic()
        got = reader.wait_for(
            lambda es: office.steps["Backlog"] in _moves(es, office.task_id), timeout=30
        )
        assert time.monotonic() - cli_done < 30  # far below the 60 s poll: the socket woke it
        _assert_once_in_order(got)
        assert _moves(got, office.task_id) == [office.steps["Review"], office.steps["Backlog"]]
        with open_host(office.db, read_only=True) as host:
            stored = [e.id for e in events.read_all(host.store) if e.id >= got[0].id]
        assert [e.id for e in got] == stored[: len(got)]
    finally:
        reader.close()
        assert served.stop() == 0
    assert list(where.iterdir()) == []
    assert "WARNING" not in served.stderr  # no PostgreSQL LISTEN tried, no fallback taken
