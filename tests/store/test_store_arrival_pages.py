"""Issue 14, target 2 (SQLite pages per arrival): what the schema and id changes rely on.

- Row ids are UUIDv7: time-ordered (a new primary-key entry lands at the right edge of its
  index) and still unique across threads and processes (74 random bits per millisecond).
- Migration 0007 makes `ix_step_entries_pending` partial (pending entries only), drops the
  event log's indexes on `at` and (task_id, id), and on SQLite rebuilds step_entry_markers
  WITHOUT ROWID: on a fresh board and on an existing 0006 board, on both databases, keeping
  every row; the pending queries (recovery's scan, the open-time probe) still read the index
  and an event read (the stream's catch-up, narrowed to a task or not) goes along the id.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from core import ids, recovery
from core.store import events, migrate
from core.store import tables as t
from core.store.database import Store


def _workspace_and_task(conn: sa.Connection, stamp: str) -> None:
    """The rows a step entry needs under it: workspace "ws" and its task "task"."""
    conn.execute(
        sa.insert(t.workspaces).values(id="ws", name="ws", created_at=stamp, is_default=True)
    )
    conn.execute(
        sa.insert(t.tasks).values(
            id="task", workspace_id="ws", title="t", created_at=stamp, updated_at=stamp
        )
    )


def test_issue_14_new_id_is_a_uuid_v7_in_the_usual_text_form() -> None:
    before_ms = time.time_ns() // 1_000_000
    made = ids.new_id()
    after_ms = time.time_ns() // 1_000_000

    parsed = uuid.UUID(made)
    assert str(parsed) == made  # 36 lowercase characters, 8-4-4-4-12, as uuid4 ids were
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert before_ms <= parsed.int >> 80 <= after_ms  # the first 48 bits: Unix milliseconds


def test_issue_14_ids_made_later_sort_later() -> None:
    """Ids made in different milliseconds sort in the order they were made, as text (what
    every index compares): a new row's key goes to the right edge of its index."""
    made = []
    for _ in range(5):
        made.append(ids.new_id())
        time.sleep(0.002)
    assert made == sorted(made)
    moment = datetime.fromtimestamp((uuid.UUID(made[0]).int >> 80) / 1000, UTC)
    assert abs((datetime.now(UTC) - moment).total_seconds()) < 60


def _ids_in_threads(threads: int, each: int) -> list[str]:
    out: list[list[str]] = [[] for _ in range(threads)]

    def make(slot: list[str]) -> None:
        slot.extend(ids.new_id() for _ in range(each))

    workers = [threading.Thread(target=make, args=(slot,)) for slot in out]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return [i for slot in out for i in slot]


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_issue_14_ids_stay_unique_across_threads_and_processes() -> None:
    """Thousands of ids in the same milliseconds, from 4 threads here and 2 other processes,
    are all distinct: the random bits, not the clock, keep them apart."""
    script = "from core import ids\nprint('\\n'.join(ids.new_id() for _ in range(20000)))\n"
    children = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    here = _ids_in_threads(4, 20000)
    there = []
    for child in children:
        out, _err = child.communicate(timeout=60)
        assert child.returncode == 0
        there.extend(out.split())
    everything = here + there
    assert len(everything) == 120000
    assert len(set(everything)) == len(everything)
    assert {uuid.UUID(i).version for i in everything} == {7}


# -- migration 0007 ----------------------------------------------------------------------------


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    yield s
    s.close()


def _index_definitions(conn: sa.Connection) -> dict[str, str]:
    if conn.dialect.name == "sqlite":
        found = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        )
    else:
        found = conn.exec_driver_sql(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
        )
    return {str(name): str(sql) for name, sql in found}


def _assert_0007_shape(conn: sa.Connection) -> None:
    defs = _index_definitions(conn)
    pending = defs["ix_step_entries_pending"]
    if conn.dialect.name == "sqlite":
        assert pending.endswith("(task_id, step_id, entry_seq) WHERE terminal IS 0"), pending
    else:
        assert "(task_id, step_id, entry_seq) WHERE (terminal IS FALSE)" in pending, pending
    assert "ix_board_events_at" not in defs
    assert "ix_board_events_task" not in defs
    if conn.dialect.name == "sqlite":
        markers = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE name = 'step_entry_markers'"
        ).scalar_one()
        assert "WITHOUT ROWID" in markers.upper()
        assert "PRIMARY KEY (entry_id, position, kind)" in markers
        assert "REFERENCES step_entries (id) ON DELETE CASCADE" in markers


def _plan(conn: sa.Connection, query: sa.Select[object]) -> list[str]:
    sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    if conn.dialect.name == "sqlite":
        return [str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
    # a fresh database's tables are too small for PostgreSQL to prefer any index
    conn.exec_driver_sql("SET enable_seqscan = off")
    try:
        return [str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {sql}")]
    finally:
        conn.exec_driver_sql("SET enable_seqscan = on")


def test_issue_14_fresh_board_has_the_partial_pending_index(store: Store) -> None:
    migrate.upgrade(store)
    with store.read() as conn:
        _assert_0007_shape(conn)


def test_issue_14_a_0006_board_upgrades_to_the_partial_index_keeping_its_entries(
    store: Store,
) -> None:
    """An existing board at revision 0006, with a pending and a terminal entry, upgrades to
    0007: the index is rebuilt partial, the rows are kept, and recovery's pending query (and
    the open-time probe) read only the pending entry, through the index."""
    assert migrate.upgrade(store, "0006") == "0006"
    stamp = ids.now()
    with store.transaction() as uow:
        _workspace_and_task(uow.conn, stamp)
        uow.conn.execute(
            sa.insert(t.step_entries),
            [
                {
                    "id": f"entry-{seq}",
                    "task_id": "task",
                    "step_id": "step",
                    "entry_seq": seq,
                    "entry_path": "E2",
                    "declaration_digest": "d",
                    "terminal": seq == 1,
                    "created_at": stamp,
                }
                for seq in (1, 2)
            ],
        )
        uow.conn.execute(
            sa.insert(t.step_entry_markers),
            [
                {
                    "entry_id": f"entry-{seq}",
                    "position": 0,
                    "kind": "clear_decisions",
                    "state": "done" if seq == 1 else "in_progress",
                    "updated_at": stamp,
                }
                for seq in (1, 2)
            ],
        )
        uow.conn.execute(
            sa.insert(t.board_events),
            [
                {"type": "task.created", "task_id": task, "at": stamp, "data": "{}"}
                for task in ("task", "other", "task")
            ],
        )

    assert migrate.upgrade(store) == migrate.HEAD_REVISION

    probe = sa.select(sa.literal(1)).where(sa.exists().where(t.step_entries.c.terminal.is_(False)))
    with store.read() as conn:
        _assert_0007_shape(conn)
        pending = conn.execute(recovery.pending_query()).mappings().all()
        assert [(r["id"], r["newest_seq"]) for r in pending] == [("entry-2", 2)]
        assert conn.execute(sa.select(sa.func.count()).select_from(t.step_entries)).scalar() == 2
        markers = conn.execute(
            sa.select(t.step_entry_markers.c.entry_id, t.step_entry_markers.c.state).order_by(
                t.step_entry_markers.c.entry_id
            )
        ).all()
        assert [tuple(m) for m in markers] == [("entry-1", "done"), ("entry-2", "in_progress")]
        narrowed = events.after(conn, 1, task_id="task")
        assert [(e.id, e.task_id) for e in narrowed] == [(3, "task")]
        assert [e.id for e in events.after(conn, 0)] == [1, 2, 3]
        scan_plan = _plan(conn, recovery.pending_query())
        probe_plan = _plan(conn, probe)
    assert any("ix_step_entries_pending" in line for line in scan_plan), scan_plan
    assert any("ix_step_entries_pending" in line for line in probe_plan), probe_plan


def test_issue_14_markers_cascade_with_their_entry_after_0007(store: Store) -> None:
    """The rebuilt marker table (SQLite: WITHOUT ROWID) still goes with its entry, and its
    primary key still refuses a second marker at one (entry, position, kind)."""
    migrate.upgrade(store)
    stamp = ids.now()
    entry = ids.new_id()
    with store.transaction() as uow:
        _workspace_and_task(uow.conn, stamp)
        uow.conn.execute(
            sa.insert(t.step_entries).values(
                id=entry,
                task_id="task",
                step_id="step",
                entry_seq=1,
                entry_path="E2",
                declaration_digest="d",
                created_at=stamp,
            )
        )
        marker = {"entry_id": entry, "position": 0, "kind": "k", "state": "done"}
        uow.conn.execute(sa.insert(t.step_entry_markers).values(**marker, updated_at=stamp))
    with pytest.raises(sa.exc.IntegrityError), store.transaction() as uow:
        uow.conn.execute(sa.insert(t.step_entry_markers).values(**marker, updated_at=stamp))
    with store.transaction() as uow:
        uow.conn.execute(sa.delete(t.step_entries).where(t.step_entries.c.id == entry))
    with store.read() as conn:
        left = conn.execute(sa.select(sa.func.count()).select_from(t.step_entry_markers))
        assert left.scalar() == 0


def test_issue_14_0007_downgrades_to_the_0006_shape_and_back(store: Store) -> None:
    """alembic's downgrade of 0007 restores the 0006 indexes (and SQLite's rowid marker
    table); upgrading again gives the 0007 shape."""
    from alembic import command

    migrate.upgrade(store)
    with store.transaction() as uow:
        command.downgrade(migrate.alembic_config(uow.conn), "0006")
    with store.read() as conn:
        assert migrate.current_revision(conn) == "0006"
        defs = _index_definitions(conn)
        assert "ix_board_events_at" in defs
        assert "ix_board_events_task" in defs
        assert "terminal, task_id, step_id, entry_seq" in defs["ix_step_entries_pending"]
        assert "WHERE" not in defs["ix_step_entries_pending"].upper()
    assert migrate.upgrade(store) == migrate.HEAD_REVISION
    with store.read() as conn:
        _assert_0007_shape(conn)
