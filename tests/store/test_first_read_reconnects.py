"""Opening a host on PostgreSQL whose pooled connection the server ends in the middle of the
first read (CI, `test_idle_timeout`: a server with `idle_session_timeout`, a machine that stalled
past it between two of the read's statements, which run outside a transaction).

Before: the recovery probe's `except Exception` took the dead connection for a failed probe,
and the read's commit then raised SQLAlchemy's `PendingRollbackError` out of `Host.open`.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.services import entries
from tests.conftest import _reset_postgres, open_host


@pytest.fixture
def pg_url(pg_database: str | None) -> str:
    if pg_database is None:
        pytest.skip("no PostgreSQL server: set LANEWAY_TEST_PG_URL (.ci/run does)")
    _reset_postgres(pg_database)
    with open_host(pg_database) as first:
        wf = first.workflows.create_from_template("simple")
        first.tasks.create(workflow=wf.id, title="kept")
    return pg_database


def _server_ends(conn: Connection) -> None:
    """What the server's `idle_session_timeout` does to a session: end its backend."""
    conn.exec_driver_sql("SELECT pg_terminate_backend(pg_backend_pid())")


def test_a_connection_the_server_ends_during_the_first_read_is_replaced(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends the first read's connection just before the recovery probe: the host
    opens all the same, on a fresh connection, and its probe was asked twice (the dead one and
    the fresh one), never read as "the probe failed"."""
    real = entries.anything_pending
    asked: list[int] = []

    def probe(conn: Connection) -> bool:
        asked.append(1)
        if len(asked) == 1:
            _server_ends(conn)
        return real(conn)

    monkeypatch.setattr(entries, "anything_pending", probe)
    with open_host(pg_url) as host:
        assert [t.title for t in host.tasks.list()] == ["kept"]
    assert len(asked) == 2


def test_a_server_that_ends_every_first_read_is_a_database_error_not_a_rollback_error(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that ends the connection on every try: the one retry is spent and the open
    fails with the driver's error (which `database_away` recognises, so a worker waits it out
    and the CLI names the database), not with SQLAlchemy's `PendingRollbackError`."""
    from core.store.database import database_away

    asked: list[int] = []

    def probe(conn: Connection) -> bool:
        asked.append(1)
        _server_ends(conn)
        return False

    monkeypatch.setattr(entries, "anything_pending", probe)
    with pytest.raises(sa.exc.DBAPIError) as raised:
        open_host(pg_url)
    assert database_away(raised.value)
    assert len(asked) == 2
