"""Everything that differs between SQLite and PostgreSQL lives here, and only here.

- SQLite: pragmas on every connection (foreign keys, WAL, busy timeout), explicit BEGIN so a
  transaction really starts at `begin()` (IMMEDIATE on the writer, so the write lock is taken
  up front instead of failing half-way).
- PostgreSQL: the psycopg 3 driver.

(Epoch liveness locks, which also differ, live in `core.store.liveness`.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url

BUSY_TIMEOUT_MS = 10_000
WRITER_OPTION = "laneway_writer"


def normalise_url(url: str) -> URL:
    """Accept `postgresql://` and pick the psycopg 3 driver for it."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def statement_error_aborts_transaction(url: URL) -> bool:
    """PostgreSQL aborts the whole transaction on a failed statement; SQLite rolls back only
    the statement. Where it aborts, work that must survive a neighbour's failure needs a
    savepoint."""
    return not is_sqlite(url)


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def sqlite_path(url: URL) -> Path | None:
    """The database file, or None for an in-memory database."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return Path(database)


def create_engine(url: URL) -> Engine:
    if is_sqlite(url):
        path = sqlite_path(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            url,
            # sqlite3's own transaction handling starts transactions lazily at the first DML;
            # we turn it off and emit BEGIN ourselves (SQLAlchemy's documented recipe).
            connect_args={"check_same_thread": False, "isolation_level": None},
            poolclass=sa.pool.StaticPool if path is None else sa.pool.QueuePool,
        )
        _install_sqlite_events(engine, wal=path is not None)
        return engine
    return sa.create_engine(url, pool_pre_ping=True)


def _install_sqlite_events(engine: Engine, *, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if wal:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        writer = conn.get_execution_options().get(WRITER_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")
