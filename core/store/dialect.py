"""Everything that differs between SQLite and PostgreSQL lives here, and only here.

- SQLite: pragmas on every connection (foreign keys, WAL, busy timeout), explicit BEGIN so a
  transaction really starts at `begin()` (IMMEDIATE on the writer, so the write lock is taken
  up front instead of failing half-way).
- PostgreSQL: the psycopg 3 driver.

(Epoch liveness locks, which also differ, live in `core.store.liveness`.)
"""

from __future__ import annotations

import os
import select
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url

from core.store import prepared, private

if TYPE_CHECKING:
    from sqlalchemy.dialects.postgresql import dml as pg_dml
    from sqlalchemy.dialects.sqlite import dml as sqlite_dml

BUSY_TIMEOUT_MS = 10_000
WAL_AUTOCHECKPOINT_PAGES = 4000
"""SQLite checkpoints the WAL back into the database inside the COMMIT that takes it past this
many pages (SQLite's default: 1,000, about 4 MB). A checkpoint copies each page the WAL holds
once, however many times it was written, and syncs twice: an Office arrival writes about 27
pages, mostly the same hot index and table pages, so at 1,000 the COMMIT of one arrival in
about 37 paid for a checkpoint. At 4,000 (a WAL of at most about 16 MB, reused in place and
removed when the last connection closes) checkpoints come a quarter as often and copy fewer
pages in all (issue 14: about +7% Office arrivals/s on SQLite, measured alternately). It
stays below 4,096 frames, the span of one hash table of SQLite's WAL index, so a reader still
finds a page's newest frame in one table, as with the default."""
WRITER_OPTION = "laneway_writer"
TCP_USER_TIMEOUT_MS = 5_000
"""How long a PostgreSQL connection's sent data may go unacknowledged before the kernel gives
the connection up (libpq `tcp_user_timeout`, TCP_USER_TIMEOUT), unless the URL names its own:
a partition that silences the server is then an error within this bound instead of a wait of
the kernel's ~15 minutes of retransmissions. It bounds above all the liveness lock connection,
asked every quarter second (core.store.liveness): a worker cut off from the server declares its
own lock lost and stops its agents within this bound plus that quarter second, which must be
shorter than the time the server takes to drop the connection and free the lock
(docs/operations.md "Network faults and server timeouts")."""


def normalise_url(url: str | URL) -> URL:
    """Accept `postgresql://` and pick the psycopg 3 driver for it. A file's path where the
    URL goes (`board.db`, what a newcomer types first) is refused naming the URL to write:
    SQLAlchemy's own "Could not parse SQLAlchemy URL" names neither the text nor the fix."""
    if isinstance(url, str) and "://" not in url:  # an embedder may pass SQLAlchemy's URL
        from core.errors import DatabaseUrlRefused

        given = url if "@" not in url else "(not shown: it may hold a password)"
        raise DatabaseUrlRefused(
            f"database URL {given}: not a URL; a SQLite file is sqlite:///{_as_path(url)}"
            " (sqlite:////srv/board.db for an absolute path), a PostgreSQL database"
            " postgresql://USER@HOST/NAME"
        )
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _as_path(text: str) -> str:
    """`text` as the path part of the SQLite URL the user likely meant, or a placeholder when
    it does not look like a path."""
    if not text or "@" in text or any(c.isspace() for c in text):
        return "board.db"
    return os.path.expanduser(text)  # a URL's path is not the shell's: `~` stays `~` there


SECRET_QUERY: Final = frozenset({"password", "sslpassword"})
"""libpq parameters a PostgreSQL URL may carry a secret in, beside its `user:password@`."""


def shown(url: URL) -> str:
    """`url` as laneway prints it: its password hidden, in `user:***@` and in the query
    (`?password=...`, which libpq reads as well), and without the driver's name."""
    hidden = {k: "***" for k in url.query if k.lower() in SECRET_QUERY}
    if hidden:
        url = url.update_query_dict(hidden)
    text = url.render_as_string(hide_password=True).replace("+psycopg", "")
    return text.replace("=%2A%2A%2A", "=***")


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


SQLITE_HEADER = b"SQLite format 3\x00"


def sqlite_file_problem(path: Path, *, writing: bool) -> str | None:
    """Why the SQLite database at `path` cannot be used, in one line, or None.

    Checked before connecting, so the user reads what is wrong instead of a driver error:
    a missing directory (laneway never creates one: a typo would scatter databases), a
    directory or file it may not write, a file that is not a SQLite database.
    """
    folder = path.parent
    if not folder.is_dir():
        return f"directory {folder} does not exist; create it first"
    if path.exists():
        if not path.is_file():
            return f"{path} is not a database file"
        if _opened_here(path):
            # Checked when this process first opened it. Opening and closing the file again
            # would drop every POSIX lock this process holds on it (a close releases them
            # all, whichever descriptor took them): another process could then take this
            # process's live connection for gone and delete its -wal and -shm.
            return (
                f"{path} is read-only; laneway needs to write it"
                if (writing and not os.access(path, os.W_OK))
                else None
            )
        try:
            with open(path, "rb") as handle:
                header = handle.read(len(SQLITE_HEADER))
        except OSError as exc:
            return f"{path} cannot be read: {exc.strerror or exc}"
        if header and header != SQLITE_HEADER:  # an empty file is a new database
            return f"{path} is not a SQLite database (corrupt, or another kind of file)"
        if writing and not os.access(path, os.W_OK):
            if on_read_only_mount(path):
                return f"{path} is on a read-only mount; laneway needs to write it"
            return f"{path} is read-only; laneway needs to write it"
    if writing and not os.access(folder, os.W_OK | os.X_OK):
        # SQLite writes its journal and laneway its lock file beside the database
        return f"directory {folder} is read-only; laneway needs to write there"
    return None


_OPEN: dict[tuple[int, int], int] = {}
"""SQLite files a store of this process has open, by (device, inode): how many stores."""
_OPEN_LOCK = threading.Lock()


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def _opened_here(path: Path) -> bool:
    identity = _identity(path)
    with _OPEN_LOCK:
        return identity is not None and identity in _OPEN


def hold_open(identity: tuple[int, int]) -> None:
    """A store of this process opened the SQLite file `identity` (`sqlite_file_problem` then
    never opens it again while it is open here)."""
    with _OPEN_LOCK:
        _OPEN[identity] = _OPEN.get(identity, 0) + 1


def let_go(identity: tuple[int, int]) -> None:
    with _OPEN_LOCK:
        left = _OPEN.get(identity, 0) - 1
        if left > 0:
            _OPEN[identity] = left
        else:
            _OPEN.pop(identity, None)


def on_read_only_mount(path: Path) -> bool:
    """Whether the file system holding `path` is mounted read-only (nobody can write there)."""
    try:
        return bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def create_engine(url: URL, *, read_only: bool = False) -> Engine:
    """The engine for `url`. `read_only`: the caller only reads (a read-only host); a SQLite
    database on a read-only mount is then opened immutable (below)."""
    if is_sqlite(url):
        path = sqlite_path(url)
        # sqlite3's own transaction handling starts transactions lazily at the first DML;
        # we turn it off and emit BEGIN ourselves (SQLAlchemy's documented recipe).
        connect_args: dict[str, Any] = {"check_same_thread": False, "isolation_level": None}
        frozen = read_only and path is not None and on_read_only_mount(path)
        if frozen and path is not None:
            # A WAL database is read through its -shm file, which SQLite must be able to create
            # beside it; on a read-only mount it cannot, so the file is opened immutable: read
            # as it lies, without -wal or -shm or locks. Nobody can be writing it there, so it
            # is the board as its last writer left it (a -wal a crashed writer left unmerged
            # is not read).
            target = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
            connect_args["uri"] = True
            engine = sa.create_engine(
                url,
                creator=lambda: sqlite3.connect(target, **connect_args),
                poolclass=sa.pool.QueuePool,
            )
        else:
            if path is not None:
                private.make_private(path)
            engine = sa.create_engine(
                url,
                connect_args=connect_args,
                poolclass=sa.pool.StaticPool if path is None else sa.pool.QueuePool,
            )
        _install_sqlite_events(engine, wal=path is not None and not frozen)
        return engine
    # No HSTORE column anywhere: without this, the driver's first connection asks the server
    # for the hstore type (a round trip on every command).
    engine = sa.create_engine(url, use_native_hstore=False, connect_args=pg_connect_args(url))
    _install_ping(engine)
    return engine


def pg_connect_args(url: URL) -> dict[str, Any]:
    return {} if "tcp_user_timeout" in url.query else {"tcp_user_timeout": TCP_USER_TIMEOUT_MS}


def tcp_user_timeout_ms(url: URL) -> int:
    """The `tcp_user_timeout` laneway's PostgreSQL connections run with: the URL's, else
    `TCP_USER_TIMEOUT_MS` (0, the kernel's retransmissions, when the URL says 0 or no number)."""
    given = url.query.get("tcp_user_timeout")
    if given is None:
        return TCP_USER_TIMEOUT_MS
    text = given if isinstance(given, str) else given[-1]
    return int(text) if text.strip().isdigit() else 0


PING_AFTER_S = 0.25
"""A pooled PostgreSQL connection idle longer than this is pinged when checked out (SELECT 1),
and replaced when the ping fails (a restarted server, a session it ended). SQLAlchemy's
`pool_pre_ping` pings at every checkout: a round trip before each of a run's reads, on a
connection put back a millisecond before. One used within the last quarter second is pinged
only when its socket is readable (the server ended the session: its goodbye waits there);
otherwise it goes out as it is: a server gone silently in that quarter second fails its
first statement instead, as the writer's connection (never pinged) does, and the pool
replaces them all."""


def _install_ping(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def connected(_dbapi: Any, record: Any) -> None:
        record.info["laneway_used"] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def checked_in(_dbapi: Any, record: Any) -> None:
        record.info["laneway_used"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def checked_out(dbapi: Any, record: Any, _proxy: Any) -> None:
        recent = time.monotonic() - record.info.get("laneway_used", 0.0) <= PING_AFTER_S
        if recent and not spoken_unasked(dbapi, unknown=True):  # no socket: the ping tells
            return
        try:
            engine.dialect.do_ping(dbapi)
        except Exception as exc:  # the driver's error: the pool retries with a new connection
            raise sa.exc.DisconnectionError(str(exc)) from exc


def spoken_unasked(dbapi: Any, *, unknown: bool) -> bool:
    """Whether the server has said something on an idle driver connection: between
    transactions it says nothing unless it is ending the session (its FATAL message, then the
    end of the stream). A look at the socket, no round trip; `unknown` when there is no socket
    to look at."""
    try:
        look = select.poll()  # not select(): a busy process's descriptors pass 1024
        look.register(dbapi.fileno(), select.POLLIN)
        return bool(look.poll(0))
    except (OSError, ValueError, AttributeError, TypeError):
        return unknown


def connection_spoken_unasked(conn: Connection, *, unknown: bool) -> bool:
    """`spoken_unasked` for a SQLAlchemy connection nobody is using; `unknown` when it is
    closed, invalidated or shows no socket to look at."""
    if conn.closed or conn.invalidated:
        return unknown
    try:
        dbapi = conn.connection.dbapi_connection
    except sa.exc.SQLAlchemyError:
        return unknown
    return unknown if dbapi is None else spoken_unasked(dbapi, unknown=unknown)


def _install_sqlite_events(engine: Engine, *, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if wal:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        writer = conn.get_execution_options().get(WRITER_OPTION, False)
        # On the driver's connection: through exec_driver_sql this one word costs a full
        # execution context, paid at the start of every transaction.
        prepared.run_driver_sql(conn, "BEGIN IMMEDIATE" if writer else "BEGIN")


def sqlite_cache_size(conn: Connection, value: int) -> int:
    """Set SQLite's `PRAGMA cache_size` on `conn`'s driver connection (negative: KiB, positive:
    pages) and return the value it replaced, to put back. Per connection and fixed, so memory
    stays bounded; every connection otherwise keeps SQLite's default (-2000, 2 MB)."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        previous = int(cursor.execute("PRAGMA cache_size").fetchone()[0])
        cursor.execute(f"PRAGMA cache_size={int(value)}")
    finally:
        cursor.close()
    return previous


def upsert_into(name: str, table: sa.Table) -> pg_dml.Insert | sqlite_dml.Insert:
    """`INSERT INTO table` in the form of the dialect called `name` (a connection's
    `dialect.name`), which has ON CONFLICT: the one place laneway builds an upsert's insert.
    Only that dialect's module is imported, here, on first use: importing PostgreSQL's costs a
    SQLite command about 40 ms, and the other way round."""
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)
