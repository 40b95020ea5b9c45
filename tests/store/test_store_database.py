"""The store's connections and its unit of work, on real databases.

SQLite connections carry the pragmas the design depends on (foreign keys, WAL, a busy
timeout); deleting a task cascades its ledger and sessions; nested `transaction()` calls join
the outer unit of work, and an exception rolls back everything written in it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from core.store import migrate
from core.store import tables as t
from core.store.database import Store
from core.store.dialect import BUSY_TIMEOUT_MS, WAL_AUTOCHECKPOINT_PAGES

STAMP = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    migrate.upgrade(s)
    with s.transaction() as uow:
        uow.conn.execute(sa.insert(t.workspaces).values(id="ws", name="ws", created_at=STAMP))
    yield s
    s.close()


@pytest.fixture
def sqlite_store(sqlite_url: str) -> Iterator[Store]:
    s = Store(sqlite_url)
    migrate.upgrade(s)
    with s.transaction() as uow:
        uow.conn.execute(sa.insert(t.workspaces).values(id="ws", name="ws", created_at=STAMP))
    yield s
    s.close()


def _insert_task(conn: sa.Connection, task_id: str) -> None:
    conn.execute(
        sa.insert(t.tasks).values(
            id=task_id, workspace_id="ws", title=task_id, created_at=STAMP, updated_at=STAMP
        )
    )


def _insert_entry(conn: sa.Connection, entry_id: str, task_id: str, seq: int = 1) -> None:
    conn.execute(
        sa.insert(t.step_entries).values(
            id=entry_id,
            task_id=task_id,
            step_id="step-review",
            entry_seq=seq,
            entry_path="E2",
            declaration_digest="d" * 64,
            created_at=STAMP,
        )
    )
    conn.execute(
        sa.insert(t.step_entry_markers).values(
            entry_id=entry_id, position=0, kind="clear_decisions", state="done", updated_at=STAMP
        )
    )


def _insert_session(conn: sa.Connection, session_id: str, task_id: str) -> None:
    conn.execute(
        sa.insert(t.task_sessions).values(id=session_id, task_id=task_id, updated_at=STAMP)
    )


def _insert_decision(conn: sa.Connection, decision_id: str, task_id: str) -> None:
    conn.execute(
        sa.insert(t.workflow_step_decisions).values(
            id=decision_id,
            task_id=task_id,
            step_id="step-review",
            participant_id="seat-1",
            decision="approved",
            decided_at=STAMP,
        )
    )


def _count(store: Store, table: sa.Table, **where: str) -> int:
    query = sa.select(sa.func.count()).select_from(table)
    for column, value in where.items():
        query = query.where(table.c[column] == value)
    with store.engine.connect() as conn:  # a separate connection: sees committed rows only
        return int(conn.execute(query).scalar_one())


# -- SQLite connections -------------------------------------------------------------------------


def _pragmas(conn: sa.Connection) -> tuple[int, str, int]:
    return (
        conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one(),
        conn.exec_driver_sql("PRAGMA journal_mode").scalar_one(),
        conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one(),
    )


def test_every_sqlite_connection_has_foreign_keys_wal_and_a_busy_timeout(
    sqlite_store: Store,
) -> None:
    expected = (1, "wal", BUSY_TIMEOUT_MS)
    with sqlite_store.transaction() as uow:
        writer = _pragmas(uow.conn)
    with sqlite_store.read() as conn:
        reader = _pragmas(conn)
    # Two connections held at once force the pool to open fresh ones, not reuse one.
    with sqlite_store.engine.connect() as a, sqlite_store.engine.connect() as b:
        pooled = [_pragmas(a), _pragmas(b)]

    assert writer == expected
    assert reader == expected
    assert pooled == [expected, expected]
    assert BUSY_TIMEOUT_MS > 0


def test_issue14_every_sqlite_connection_checkpoints_the_wal_at_4000_pages(
    sqlite_store: Store,
) -> None:
    """Issue 14: the WAL is checkpointed at 4,000 pages, not SQLite's 1,000, on the writer and
    on every pooled connection (any of them may commit the write that crosses it) - and below
    the 4,096 frames one hash table of the WAL index spans."""
    with sqlite_store.transaction() as uow:
        writer = uow.conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one()
    with sqlite_store.engine.connect() as a, sqlite_store.engine.connect() as b:
        pooled = [c.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() for c in (a, b)]
    assert writer == WAL_AUTOCHECKPOINT_PAGES == 4000
    assert pooled == [4000, 4000]
    assert WAL_AUTOCHECKPOINT_PAGES < 4096


def test_sqlite_enforces_foreign_keys(sqlite_store: Store) -> None:
    with pytest.raises(sa.exc.IntegrityError), sqlite_store.transaction() as uow:
        _insert_entry(uow.conn, "orphan-entry", "no-such-task")

    assert _count(sqlite_store, t.step_entries) == 0


def test_deleting_a_task_cascades_its_ledger_sessions_and_decisions(sqlite_store: Store) -> None:
    with sqlite_store.transaction() as uow:
        for task_id in ("doomed", "bystander"):
            _insert_task(uow.conn, task_id)
            _insert_entry(uow.conn, f"{task_id}-e1", task_id, seq=1)
            _insert_entry(uow.conn, f"{task_id}-e2", task_id, seq=2)
            _insert_session(uow.conn, f"{task_id}-s", task_id)
            _insert_decision(uow.conn, f"{task_id}-d", task_id)
    assert _count(sqlite_store, t.step_entry_markers) == 4

    with sqlite_store.transaction() as uow:
        uow.conn.execute(sa.delete(t.tasks).where(t.tasks.c.id == "doomed"))

    assert _count(sqlite_store, t.step_entries, task_id="doomed") == 0
    assert _count(sqlite_store, t.task_sessions, task_id="doomed") == 0
    assert _count(sqlite_store, t.workflow_step_decisions, task_id="doomed") == 0
    remaining_markers = _count(sqlite_store, t.step_entry_markers)
    assert remaining_markers == 2  # only the bystander's two entries keep their markers
    assert _count(sqlite_store, t.step_entries, task_id="bystander") == 2
    assert _count(sqlite_store, t.task_sessions, task_id="bystander") == 1


# -- the unit of work, on both dialects ---------------------------------------------------------


def test_nested_transaction_joins_the_outer_one_and_commits_with_it(store: Store) -> None:
    with store.transaction() as outer:
        _insert_task(outer.conn, "t1")
        with store.transaction() as inner:
            assert inner is outer
            _insert_entry(inner.conn, "e1", "t1")
        # The inner block has ended but nothing is committed until the outer one ends.
        assert store.in_transaction
        assert _count(store, t.tasks) == 0
        assert _count(store, t.step_entries) == 0
        with store.read() as conn:  # a read inside the unit of work sees its own writes
            assert conn.execute(sa.select(sa.func.count()).select_from(t.tasks)).scalar() == 1

    assert not store.in_transaction
    assert _count(store, t.tasks) == 1
    assert _count(store, t.step_entries) == 1


def test_exception_rolls_back_task_entries_and_decisions_written_in_one_unit(
    store: Store,
) -> None:
    def write_then_fail() -> None:
        with store.transaction() as uow:
            _insert_task(uow.conn, "t1")
            _insert_entry(uow.conn, "e1", "t1")
            with store.transaction() as nested:
                _insert_decision(nested.conn, "d1", "t1")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_then_fail()

    assert _count(store, t.tasks) == 0
    assert _count(store, t.step_entries) == 0
    assert _count(store, t.step_entry_markers) == 0
    assert _count(store, t.workflow_step_decisions) == 0
    assert not store.in_transaction
    # The writer connection is usable afterwards.
    with store.transaction() as uow:
        _insert_task(uow.conn, "t2")
    assert _count(store, t.tasks) == 1


def test_exception_raised_in_a_nested_block_rolls_back_the_outer_writes(store: Store) -> None:
    def fail_inside_nested_block() -> None:
        with store.transaction() as outer:
            _insert_task(outer.conn, "t1")
            with store.transaction() as inner:
                _insert_decision(inner.conn, "d1", "t1")
                raise ValueError("inner")

    with pytest.raises(ValueError, match="inner"):
        fail_inside_nested_block()

    assert _count(store, t.tasks) == 0
    assert _count(store, t.workflow_step_decisions) == 0


def test_another_threads_transaction_waits_instead_of_joining(store: Store) -> None:
    inside = threading.Event()
    seen: dict[str, object] = {}

    def other_writer() -> None:
        inside.wait(5)
        seen["joined_outer"] = store.in_transaction  # thread-local: False on this thread
        with store.transaction() as uow:
            seen["tasks_visible"] = uow.conn.execute(
                sa.select(sa.func.count()).select_from(t.tasks)
            ).scalar()
            _insert_task(uow.conn, "t2")

    worker = threading.Thread(target=other_writer)
    worker.start()
    with store.transaction() as uow:
        _insert_task(uow.conn, "t1")
        inside.set()
        time.sleep(0.3)  # give the other thread time to (wrongly) barge in
        assert "tasks_visible" not in seen
    worker.join(10)

    assert not worker.is_alive()
    assert seen == {"joined_outer": False, "tasks_visible": 1}
    assert _count(store, t.tasks) == 2
