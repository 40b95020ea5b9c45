"""Schema creation and upgrade, through alembic, on the store's own connection.

Checking the schema is on every command's path, upgrading it only on `init`'s (and a host
opened with `upgrade=True` on an older database). alembic, with mako and pygments behind it,
costs more to import than the rest of a command, so the check reads the version table itself
and compares it with `HEAD_REVISION`; alembic is imported only to upgrade.
`tests/store/test_store_migrations.py` keeps `HEAD_REVISION` equal to alembic's head.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.store.database import Store

if TYPE_CHECKING:
    from alembic.config import Config

VERSION_TABLE = "laneway_alembic_version"
HEAD_REVISION = "0035"
"""The newest migration under `migrations/versions`; a new migration updates it."""
_SCRIPTS = Path(__file__).with_name("migrations")

_version_table = sa.table(VERSION_TABLE, sa.column("version_num", sa.String))


def alembic_config(conn: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_SCRIPTS))
    cfg.attributes["connection"] = conn
    return cfg


def head_revision() -> str:
    """alembic's head, read from the migration scripts (imports alembic; see `HEAD_REVISION`)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(conn: Connection) -> str | None:
    """The revision recorded in the version table, or None when there is none (a fresh
    database, or one laneway never initialised)."""
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    return _recorded(conn)


def _recorded(conn: Connection) -> str | None:
    rows = conn.execute(sa.select(_version_table.c.version_num)).scalars().all()
    # alembic keeps one row per head; laneway's migrations form one line, so one row.
    return rows[0] if len(rows) == 1 else None


def upgrade(store: Store, revision: str = "head") -> str:
    """Bring the schema to `revision` (idempotent); returns the revision now in force."""
    from alembic import command

    with store.transaction() as uow:
        command.upgrade(alembic_config(uow.conn), revision)
        found = current_revision(uow.conn)
    assert found is not None
    return found


def recorded_is_current(conn: Connection) -> bool:
    """`is_current`'s one statement, on a read the caller has open (a host's opening reads the
    board in the same transaction). It raises what the read raises: when the version table
    is missing, for one; the caller then asks `is_current`, which tells that apart."""
    return _recorded(conn) == HEAD_REVISION


def is_current(store: Store) -> bool:
    """Whether the schema is at `HEAD_REVISION`. Every command asks, so it costs one
    statement (a round trip on PostgreSQL): the version table is read as if it exists, and
    only when that read fails is the table looked for: a database laneway never initialised
    has none (not current); any other failure is raised as it is."""
    try:
        with store.read() as conn:
            return _recorded(conn) == HEAD_REVISION
    except sa.exc.DBAPIError:
        with store.read() as conn:
            if sa.inspect(conn).has_table(VERSION_TABLE):
                raise
        return False
