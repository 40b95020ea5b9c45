"""The alembic migrations build exactly the schema `core.store.tables` declares, on both
dialects, and `upgrade` can run any number of times."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from core import Host
from core.errors import NotInitialised
from core.store import migrate, tables
from core.store.database import Store

VERSION_TABLE = "laneway_alembic_version"


def _sqlite_empty_string_default(
    context: MigrationContext,
    inspected_column: Any,
    metadata_column: Any,
    inspected_default: str | None,
    metadata_default: Any,
    rendered_metadata_default: str | None,
) -> bool | None:
    """Compare `server_default=""` ourselves on SQLite; defer to alembic for everything else.

    Why: alembic's SQLite comparison strips quotes with the pattern `'(.+)'`, which cannot
    match the empty literal, so it reports `DEFAULT ''` (what the migration created and
    `tables` declares) as different from `""` for every such column. This is not an ignore:
    the column's reflected default is still checked to be exactly the empty literal.
    """
    if context.dialect.name == "sqlite" and rendered_metadata_default == "":
        return (inspected_default or "").strip("()") != "''"
    return None


def _schema_differences(conn: sa.Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn,
        opts={
            # The migration context laneway runs keeps its revision in this table; telling
            # the comparison so is what keeps it from reporting that table as "extra".
            "version_table": VERSION_TABLE,
            "compare_type": True,
            "compare_server_default": _sqlite_empty_string_default,
        },
    )
    return list(compare_metadata(context, tables.metadata))


@pytest.fixture
def store(db_url: str) -> Any:
    s = Store(db_url)
    yield s
    s.close()


def test_upgrade_head_builds_exactly_the_declared_schema(store: Store) -> None:
    revision = migrate.upgrade(store)

    assert revision == migrate.head_revision()
    with store.read() as conn:
        assert _schema_differences(conn) == []
        created = set(sa.inspect(conn).get_table_names())
    assert created == set(tables.metadata.tables) | {VERSION_TABLE}


def test_version_table_is_laneway_alembic_version_holding_the_head(store: Store) -> None:
    migrate.upgrade(store)

    with store.read() as conn:
        names = sa.inspect(conn).get_table_names()
        versions = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").all()
    assert VERSION_TABLE in names
    assert "alembic_version" not in names  # would collide with a host application's alembic
    assert versions == [(migrate.head_revision(),)]


def test_upgrade_is_idempotent_and_keeps_data(store: Store) -> None:
    first = migrate.upgrade(store)
    with store.transaction() as uow:
        uow.conn.execute(
            sa.insert(tables.workspaces).values(id="ws-1", name="kept", created_at="2026-01-01")
        )

    second = migrate.upgrade(store)
    third = migrate.upgrade(store)

    assert first == second == third == migrate.head_revision()
    assert migrate.is_current(store)
    with store.read() as conn:
        assert _schema_differences(conn) == []
        assert conn.execute(sa.select(tables.workspaces.c.name)).scalars().all() == ["kept"]
        assert conn.exec_driver_sql(f"SELECT count(*) FROM {VERSION_TABLE}").scalar_one() == 1


def test_empty_database_is_not_current_and_host_refuses_it_without_upgrade(db_url: str) -> None:
    empty = Store(db_url)
    try:
        assert not migrate.is_current(empty)
    finally:
        empty.close()

    with pytest.raises(NotInitialised, match="not initialised"):
        Host.open(db_url, upgrade=False)


def test_sqlite_board_events_never_reuse_an_id(sqlite_url: str) -> None:
    """The migration declares board_events AUTOINCREMENT on SQLite (an id pruned away is
    never handed out again). tables.py no longer repeats it, so this is where it is held."""
    store = Store(sqlite_url)
    try:
        migrate.upgrade(store)
        with store.read() as conn:
            sql = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'board_events'"
            ).scalar_one()
    finally:
        store.close()
    assert "AUTOINCREMENT" in sql.upper()


def test_a_board_upgraded_with_two_claimed_runs_of_one_session_keeps_the_first(
    store: Store,
) -> None:
    """Migration 0034 on a board where the defect struck: the later claim goes back to the
    queue (its agent's count kept true), and the index is then in force."""
    assert migrate.upgrade(store, "0033") == "0033"
    at = ["2026-12-07T10:00:00", "2026-12-07T10:00:10", "2026-12-07T10:00:20"]
    with store.transaction() as uow:
        uow.conn.execute(sa.insert(tables.workspaces).values(id="ws", name="ws", created_at=at[0]))
        uow.conn.execute(
            sa.insert(tables.agent_profiles).values(
                id="agent", workspace_id="ws", name="coder", claimed_runs=3,
                max_concurrent_sessions=3, created_at=at[0],
            )
        )  # fmt: skip
        uow.conn.execute(
            sa.insert(tables.runs),
            [
                {"id": run_id, "agent_profile_id": "agent", "task_id": task,
                 "reason": "test", "status": "claimed", "requested_at": at[0],
                 "claimed_at": claimed_at, "claimed_epoch": "e", "attempts": 1}
                for run_id, task, claimed_at in (
                    ("early", "task", at[1]), ("late", "task", at[2]), ("alone", "other", at[2])
                )
            ],
        )  # fmt: skip

    assert migrate.upgrade(store) == migrate.HEAD_REVISION
    with store.read() as conn:
        found = dict(conn.execute(sa.select(tables.runs.c.id, tables.runs.c.status)).all())
        count = conn.execute(sa.select(tables.agent_profiles.c.claimed_runs)).scalar_one()
        epoch = conn.execute(
            sa.select(tables.runs.c.claimed_epoch).where(tables.runs.c.id == "late")
        ).scalar()
    assert found == {"early": "claimed", "late": "queued", "alone": "claimed"}
    assert count == 2
    assert epoch is None
    with pytest.raises(sa.exc.IntegrityError), store.transaction() as uow:
        uow.conn.execute(
            sa.update(tables.runs).where(tables.runs.c.id == "late").values(status="claimed")
        )
