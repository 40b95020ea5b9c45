"""Issue 14 target 1: the schema check every command makes reads the version table and compares
it with `migrate.HEAD_REVISION`, without alembic; only an upgrade imports alembic."""

from __future__ import annotations

import pytest

from core import Host
from core.errors import NotInitialised
from core.store import migrate
from core.store.database import Store


def test_head_constant_is_alembics_head() -> None:
    """A new migration must move `HEAD_REVISION` with it, or every command would refuse (or
    accept) the wrong schema."""
    assert migrate.head_revision() == migrate.HEAD_REVISION


def test_revision_is_read_from_the_version_table(db_url: str) -> None:
    store = Store(db_url)
    try:
        with store.read() as conn:
            assert migrate.current_revision(conn) is None
        assert migrate.upgrade(store) == migrate.HEAD_REVISION
        with store.read() as conn:
            assert migrate.current_revision(conn) == migrate.HEAD_REVISION
        assert migrate.is_current(store)
    finally:
        store.close()


def test_an_older_schema_is_not_current_and_only_an_upgrade_opens_it(db_url: str) -> None:
    """A database one migration behind is refused by a host that may not upgrade (every
    command but `init`), and brought to the head by one that may."""
    from alembic.script import ScriptDirectory

    # the head's parent, not head - 1: revisions are chained, not always consecutive
    script = ScriptDirectory.from_config(migrate.alembic_config())
    older = script.get_revision(migrate.HEAD_REVISION).down_revision
    assert isinstance(older, str)
    store = Store(db_url)
    try:
        assert migrate.upgrade(store, older) == older
        with store.read() as conn:
            assert migrate.current_revision(conn) == older
        assert not migrate.is_current(store)
    finally:
        store.close()
    with pytest.raises(NotInitialised, match="not initialised"):
        Host.open(db_url, upgrade=False)
    with Host.open(db_url) as host, host.store.read() as conn:
        assert migrate.current_revision(conn) == migrate.HEAD_REVISION
