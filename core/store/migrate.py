"""Schema creation and upgrade, through alembic, on the store's own connection."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from core.store.database import Store

VERSION_TABLE = "laneway_alembic_version"
_SCRIPTS = Path(__file__).with_name("migrations")


def alembic_config(conn: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_SCRIPTS))
    cfg.attributes["connection"] = conn
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(conn: Connection) -> str | None:
    ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return ctx.get_current_revision()


def upgrade(store: Store, revision: str = "head") -> str:
    """Bring the schema to `revision` (idempotent); returns the revision now in force."""
    with store.transaction() as uow:
        command.upgrade(alembic_config(uow.conn), revision)
        found = current_revision(uow.conn)
    assert found is not None
    return found


def is_current(store: Store) -> bool:
    with store.read() as conn:
        return current_revision(conn) == head_revision()
