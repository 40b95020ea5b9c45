"""Issue 27 item 1, connections a PostgreSQL server ends while they sit idle, in one process.

- The writer connection the server ended while it sat idle (`pg_terminate_backend` here, as an
  `idle_session_timeout` does) is replaced before the next transaction uses it: the write works
  and nothing warns. Fails on the main this branch started from (`the connection is lost`).
- The liveness lock connection is not ended by a server `idle_session_timeout` (0.4 s here, on
  a database of the test's own: tests/conftest.py `idle_timeout_db`; it turns the timeout off
  for itself): a host idle past the timeout keeps its epoch, and others see that epoch alive.
  Fails on the main this branch started from (the server ended the lock connection: the epoch
  was dead to others and the host fenced itself at its next check).

PostgreSQL only: both are a PostgreSQL server's doing.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import PG_URL, _pg_engine, _reset_postgres, eventually, open_host

_SESSIONS = sa.text(
    "SELECT pid, application_name, state = 'idle' AND now() - state_change > interval '0.6 s' "
    "AS idled FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"
)


def _sessions(name: str) -> list[Any]:
    """The sessions the server has on database `name`, asked from another database."""
    assert PG_URL is not None
    engine = _pg_engine(PG_URL)
    try:
        with engine.connect() as conn:
            return list(conn.execute(_SESSIONS, {"name": name}))
    finally:
        engine.dispose()


def _is_lock(session: Any) -> bool:
    return bool(session.application_name == f"laneway pid {os.getpid()}")


def test_item1_an_idle_writer_the_server_ended_is_replaced(
    pg_database: str | None, laneway_logs: list[dict[str, Any]]
) -> None:
    """Item 1 / a session ended while idle: the next write works, with no WARNING."""
    if pg_database is None:
        pytest.skip("no PostgreSQL server: set LANEWAY_TEST_PG_URL (.ci/run does)")
    _reset_postgres(pg_database)
    name = pg_database.rsplit("/", 1)[1]
    with open_host(pg_database) as host:
        wf = host.workflows.create_from_template("simple")
        host.tasks.create(workflow=wf.id, title="before")
        ended = [s.pid for s in _sessions(name) if not _is_lock(s)]
        assert ended  # the writer, at least
        engine = _pg_engine(PG_URL or "")
        with engine.connect() as conn:
            for pid in ended:
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        engine.dispose()
        eventually(
            lambda: not {s.pid for s in _sessions(name)} & set(ended),
            timeout=10,
            what="the server to end the sessions",
        )
        host.tasks.create(workflow=wf.id, title="after")
        assert sorted(t.title for t in host.tasks.list()) == ["after", "before"]
    assert [r["message"] for r in laneway_logs if r["level"] in ("WARNING", "ERROR")] == []


def test_item1_an_idle_hosts_lock_outlives_the_idle_timeout(idle_timeout_db: str) -> None:
    """Item 1 / idle_session_timeout: the lock connections idle past the timeout and hold."""
    name = idle_timeout_db.rsplit("/", 1)[1]
    with open_host(idle_timeout_db) as host, open_host(idle_timeout_db) as other:
        epoch = host.epoch
        assert epoch is not None

        def idled() -> list[Any] | None:
            locks = [s for s in _sessions(name) if _is_lock(s)]
            return locks if len(locks) < 2 or all(s.idled for s in locks) else None

        locks = eventually(idled, timeout=10, what="the lock connections to idle past it")
        assert len(locks) == 2  # neither was ended
        assert not other.epoch_is_dead(epoch)
        assert host.live_epoch() == epoch
