"""The store: one engine, one writer connection, and the unit of work.

Every write goes through `Store.transaction()`, which hands out a `UnitOfWork` bound to the
single writer connection. One writer connection per process is deliberate: SQLite has one
writer anyway (other processes queue on BEGIN IMMEDIATE), and a held connection costs a
fraction of a pooled checkout per transaction. Nested `transaction()` calls on the same
thread join the outer transaction, so a caller can span task, ledger and decision writes in one
commit. Reads that need no transaction use `Store.read()` on a pooled connection.

The writer mutex is held for one transaction, never across action execution.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from core.errors import DatabaseUnusable, ValueRefused
from core.logs import logger
from core.store import dialect, events, prepared, wake
from core.store.liveness import Liveness

T = TypeVar("T")
_VALUE_ERRORS = (OverflowError, UnicodeEncodeError)
"""What SQLite's driver raises, unwrapped, for an integer or a string it cannot bind."""


def refused_value(exc: BaseException) -> ValueRefused | None:
    """A one-line, SQL-free error for a value the database refused, or None for anything else.

    Input is validated before it reaches the store; this is the net under that validation, so
    that what slips through still reads as one line naming the problem, never the statement.
    """
    cause: BaseException | None = exc
    if isinstance(exc, sa.exc.StatementError):
        cause = exc.orig
        if not isinstance(exc, sa.exc.DataError) and not isinstance(cause, _VALUE_ERRORS):
            return None
    elif not isinstance(exc, _VALUE_ERRORS):
        return None
    lines = str(cause).strip().splitlines() or [type(cause).__name__]
    return ValueRefused(f"the database refused a value: {lines[0]}")


_AWAY_WORDS = (
    "database is locked",
    "database or disk is full",
    "disk i/o error",
    "unable to open database file",
)
"""SQLite's words for a database that is there but cannot be written now."""


def database_away(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached or written for now - the connection
    is lost (a server restart, a terminated session), SQLite's lock is held past its
    busy_timeout, the disk is full - rather than that a statement was wrong: a worker waits
    such a fault out instead of exiting, and a run in hand is not failed for it."""
    if isinstance(exc, sa.exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
            if "sqlite" not in type(exc.orig).__module__:
                return True  # the server's driver: a lost or refused connection
            text = str(exc.orig).lower()
            return any(word in text for word in _AWAY_WORDS)
        return False
    if isinstance(exc, OSError):
        import errno

        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return False


@contextmanager
def _values_refused() -> Iterator[None]:
    try:
        yield
    except (sa.exc.StatementError, *_VALUE_ERRORS) as exc:
        refused = refused_value(exc)
        if refused is None:
            raise
        raise refused from None


@attrs.define(eq=False)
class UnitOfWork:
    """One open transaction on the writer connection."""

    conn: Connection
    store: Store
    events: list[Any] = attrs.field(factory=list)
    """Board events recorded in this transaction, inserted at its COMMIT (core.store.events)."""
    savepoints: int = 0
    """Savepoints taken in this transaction (`Store.isolated`), which names the next."""
    queued_triggers: bool = False
    """The transaction put a trigger in the outbox (`core.outbox.put`): once it commits, the
    store's `triggers_queued` is set for this process to deliver it (`core.worker`)."""

    def run(self, statement: sa.ClauseElement, values: Mapping[str, Any]) -> prepared.Result:
        """Execute a module-level statement through its prepared driver SQL."""
        return prepared.execute(self.conn, statement, values)


class _Joined(Generic[T]):
    """A context that hands out what is already open (the thread's unit of work, or its
    connection) and does nothing on exit: that unit's own context commits or rolls back."""

    __slots__ = ("_value",)

    def __init__(self, value: T) -> None:
        self._value = value

    def __enter__(self) -> T:
        return self._value

    def __exit__(self, *_exc: object) -> None:
        return None


@attrs.define(eq=False)
class _FileIdentity:
    """The SQLite file a store opened, by device and inode: a file deleted or replaced under
    the process (`rm`, a restore that renames a copy over it) is noticed before the next
    write, which would otherwise land in the unlinked file and vanish with it."""

    path: Path
    identity: tuple[int, int]
    gone: bool = False

    @classmethod
    def of(cls, url: URL) -> _FileIdentity | None:
        path = dialect.sqlite_path(url)
        if path is None:
            return None
        try:
            info = os.stat(path)
        except OSError:
            return None
        return cls(path.resolve(), (info.st_dev, info.st_ino))

    def check(self) -> None:
        """Raise DatabaseUnusable (one ERROR the first time) when the file at the path is no
        longer the one opened: this process writes no more."""
        if not self.gone:
            try:
                info = os.stat(self.path)
                same = (info.st_dev, info.st_ino) == self.identity
            except OSError:
                same = False
            if same:
                return
            self.gone = True
            logger.bind(database=str(self.path)).error(
                "the database file was deleted or replaced under this process; it writes no more"
            )
        raise DatabaseUnusable(
            f"database {self.path} was deleted or replaced under this process; "
            "it writes no more (restart it)"
        )


class Store:
    def __init__(self, url: str, *, read_only: bool = False) -> None:
        """:param read_only: the store is only read (a read-only host)."""
        self.url: URL = dialect.normalise_url(url)
        self.engine: Engine = dialect.create_engine(self.url, read_only=read_only)
        self.is_sqlite = dialect.is_sqlite(self.url)
        self._writer: Connection | None = None
        self._lock = threading.RLock()
        self._local = threading.local()
        self.triggers_queued = threading.Event()
        """Set when a transaction of this process that put a trigger in the outbox committed:
        the process that caused it delivers it (`core.worker` after each run), rather than
        leaving it to a later scheduler pass."""
        self._needs_savepoints = dialect.statement_error_aborts_transaction(self.url)
        if not self.is_sqlite:
            # statements sent through SQLAlchemy first send what `prepared.defer` queued
            sa.event.listen(self.engine, "before_cursor_execute", prepared.follow_deferred)
        self.liveness = Liveness(self.url, self.engine)
        """Which epochs are dead on this database (see `core.store.liveness`)."""
        self._file = _FileIdentity.of(self.url) if self.is_sqlite else None
        if self._file is not None:
            dialect.hold_open(self._file.identity)
        self._notifier = wake.Notifier(self._file.path) if self._file is not None else None
        """Wakes the processes waiting on this SQLite board after a commit of events
        (`core.store.wake`; PostgreSQL's NOTIFY goes with the insert itself)."""
        self.observer: events.Observer | None = None
        """Gets each transaction's events after its COMMIT (the host installs it)."""
        self.on_begin: Callable[[Connection], None] | None = None
        """Called with the connection at the start of every outermost transaction and read
        (the host checks the board's catalogue version there)."""
        self.on_version: Callable[[Connection, int], None] | None = None
        """Given the board's catalogue version read by a statement that needed a read anyway
        (`follow_version`), does what `on_begin` does with the version it reads."""
        self.after_end: Callable[[], None] | None = None
        """Called once the outermost transaction or read on this thread has closed (the host
        publishes there a bundle that `on_begin` found due: never inside an open one)."""

    @property
    def display_url(self) -> str:
        return dialect.shown(self.url)

    def _writer_conn(self) -> Connection:
        # A writer the driver found broken (the server restarted, or ended the session) is
        # replaced, not reused: the pool pre-pings the new one (PostgreSQL), so the first
        # transaction after a restart works instead of failing on the dead socket. So is one
        # the server ended while it sat idle (`idle_session_timeout`, a terminated backend):
        # its socket is readable with nobody asking, the server's goodbye.
        if (
            self._writer is not None
            and not self.is_sqlite
            and dialect.connection_spoken_unasked(self._writer, unknown=False)
        ):
            self._writer.invalidate()
        if self._writer is not None and self._writer.invalidated:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                self._writer.close()
            self._writer = None
        if self._writer is None or self._writer.closed:
            self._writer = self.engine.connect().execution_options(**{dialect.WRITER_OPTION: True})
        return self._writer

    def transaction(self, *, follow_board: bool = True) -> AbstractContextManager[UnitOfWork]:
        """A unit of work: commits on normal exit, rolls back on an exception.

        :param follow_board: False skips `on_begin` (the board-version read) for a caller that
            acts on a bundle it already read and keeps (an entry's walk): the check would
            change nothing it does, and the next transaction or read makes it."""
        current: UnitOfWork | None = getattr(self._local, "uow", None)
        if current is not None:
            # joining the open one (an arrival joins a dozen times): no generator to drive
            return _Joined(current)
        return self._transaction(follow_board)

    @contextmanager
    def _transaction(self, follow_board: bool) -> Iterator[UnitOfWork]:
        committed: list[events.Event] = []
        wrote = False
        shared: _SharedRead | None = getattr(self._local, "shared", None)
        if shared is not None:
            shared.end()  # the reads after this write see it
        try:
            with self._lock:
                if self._file is not None:
                    self._file.check()
                conn = self._writer_conn()
                uow = UnitOfWork(conn, self)
                self._local.uow = uow
                try:
                    with _values_refused(), conn.begin():
                        if self.on_begin is not None and follow_board and self._follows():
                            self.on_begin(conn)
                        yield uow
                        wrote = bool(uow.events)
                        committed = events.flush(uow)
                        # what is still queued (the outbox's insert, a settle) goes with COMMIT
                        prepared.flush_deferred(conn, commit=True)
                    if wrote and self._notifier is not None:
                        # after COMMIT, never before: a woken reader must find the rows
                        self._notifier.committed()
                    if uow.queued_triggers:
                        self.triggers_queued.set()
                    if committed and self.observer is not None:
                        # still under the writer lock: the queue's order is the commit order
                        self.observer.committed(committed)
                finally:
                    self._local.uow = None
                    prepared.drop_deferred(conn)  # what a rolled-back transaction left unsent
        finally:
            self._ended()
        if committed and self.observer is not None:
            # observers run with the writer free (they may write, or take their time)
            self.observer.drain()

    # -- a run's life without the board-version read of every statement group -----------------

    @contextmanager
    def keeping_board(self) -> Iterator[None]:
        """Within, this thread's transactions and reads skip `on_begin` (the board-version
        read), for a caller that followed the board a moment ago and acts on what it found: a
        run, from its claim to its agent's start and from its agent's end to its release, does
        a dozen short writes and reads, none of which a catalogue change made meanwhile would
        alter. Its `agent_turn` blocks follow the board again, and so does the first
        transaction or read after one (the agent may have worked for minutes)."""
        outer = getattr(self._local, "keep", None)
        self._local.keep = "fresh"
        try:
            yield
        finally:
            self._local.keep = outer

    @contextmanager
    def agent_turn(self) -> Iterator[None]:
        """Within `keeping_board`: while an agent works (what it says is written as it comes),
        every transaction and read follows the board; the first one after follows it too."""
        outer = getattr(self._local, "keep", None)
        self._local.keep = None
        try:
            yield
        finally:
            self._local.keep = "stale" if outer is not None else None

    def _follows(self) -> bool:
        keep = getattr(self._local, "keep", None)
        if keep == "fresh":
            return False
        if keep == "stale":
            self._local.keep = "fresh"
        return True

    def _ended(self) -> None:
        if self.after_end is not None:
            self.after_end()

    def follow_version(self, conn: Connection, version: int) -> None:
        """Follow the board from a catalogue version the caller read in its own statement
        (instead of `on_begin`'s read, for a transaction opened with ``follow_board=False``)."""
        if self.on_version is not None:
            self.on_version(conn, version)

    @contextmanager
    def write_connection(self, *, follow_board: bool = True) -> Iterator[Connection]:
        """`transaction()`, handing out just its connection."""
        with self.transaction(follow_board=follow_board) as uow:
            yield uow.conn

    @contextmanager
    def isolated(self) -> Iterator[None]:
        """Inside a unit of work: a failure in this block leaves the rest of the unit usable
        (a savepoint where the database needs one). Outside one: its own transaction."""
        current: UnitOfWork | None = getattr(self._local, "uow", None)
        if current is None:
            with self.transaction():
                yield
        elif self._needs_savepoints:
            # A savepoint on the driver cursor, sent with the block's first statement (a
            # deferred statement, `core.store.prepared.defer`) and never released: RELEASE
            # would be a round trip of its own, and COMMIT keeps what an unreleased savepoint
            # holds all the same.
            conn = current.conn
            prepared.flush_deferred(conn)  # a failure of what came before is not the block's
            mark = events.mark(current)
            current.savepoints += 1
            name = f"laneway_sp_{current.savepoints}"
            savepoint = prepared.defer_driver_sql(conn, f"SAVEPOINT {name}")
            try:
                yield
                prepared.flush_deferred(conn)  # a failure of what the block queued is the block's
            except BaseException:
                prepared.drop_deferred(conn)  # queued in the block: undone with it
                if savepoint.sent:
                    prepared.run_driver_sql(conn, f"ROLLBACK TO SAVEPOINT {name}")
                events.rollback_to(current, mark)  # their changes went with the savepoint
                raise
        else:
            yield

    @property
    def in_transaction(self) -> bool:
        return getattr(self._local, "uow", None) is not None

    def read(self) -> AbstractContextManager[Connection]:
        """A connection for reads: the open unit of work's, else the thread's shared read's
        (`reads_together`), else a pooled one."""
        current: UnitOfWork | None = getattr(self._local, "uow", None)
        if current is not None:
            return _Joined(current.conn)
        shared: _SharedRead | None = getattr(self._local, "shared", None)
        if shared is not None:
            return _Joined(shared.conn(self._read))
        return self._read()

    @contextmanager
    def reads_together(self) -> Iterator[None]:
        """Within, this thread's reads share one connection and one read transaction (one
        BEGIN, one COMMIT, one pool checkout: a run's few reads before its agent starts were a
        transaction each, issue 45) until the thread writes: a write ends it, and the reads
        after it take another, which sees the write. Nothing is held across a write, nor
        past the block."""
        if getattr(self._local, "shared", None) is not None or (
            self.is_sqlite and dialect.sqlite_path(self.url) is None
        ):
            yield  # joined the outer one; an in-memory database has its one connection
            return
        shared = self._local.shared = _SharedRead()
        try:
            yield
        except BaseException as exc:
            self._local.shared = None
            shared.end(exc)
            raise
        self._local.shared = None
        shared.end()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        if self.is_sqlite and dialect.sqlite_path(self.url) is None:
            # An in-memory database exists only on its one connection.
            with self.transaction() as uow:
                yield uow.conn
            return
        try:
            with _values_refused(), self.engine.connect() as conn, _no_transaction(conn):
                with conn.begin():
                    if self.on_begin is not None and self._follows():
                        self.on_begin(conn)
                    yield conn
        finally:
            self._ended()

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if self._notifier is not None:
                self._notifier.close()
        self.engine.dispose()
        if self._file is not None:
            dialect.let_go(self._file.identity)
            self._file = None


class _SharedRead:
    """The read `Store.reads_together` shares: opened at its first read, ended by a write."""

    __slots__ = ("_open", "_stack")

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None
        self._open: Connection | None = None

    def conn(self, opener: Callable[[], AbstractContextManager[Connection]]) -> Connection:
        if self._open is None:
            stack = contextlib.ExitStack()
            self._open = stack.enter_context(opener())
            self._stack = stack
        return self._open

    def end(self, exc: BaseException | None = None) -> None:
        stack, self._stack, self._open = self._stack, None, None
        if stack is not None:
            if exc is None:
                stack.close()
            else:
                stack.__exit__(type(exc), exc, exc.__traceback__)


@contextmanager
def _no_transaction(conn: Connection) -> Iterator[None]:
    """On PostgreSQL, a read's statements run outside a transaction: READ COMMITTED gives each
    statement its own snapshot in a transaction or not, so a read's BEGIN and COMMIT were two
    round trips buying nothing. The driver's connection is switched, not SQLAlchemy's
    (`isolation_level="AUTOCOMMIT"` would make the pool reset the level explicitly at checkin,
    and a connection set so no longer sends its BEGIN in its first statement's round trip,
    `core.store.prepared`); psycopg's commit and rollback send nothing on an idle connection.
    Elsewhere: nothing changes."""
    dbapi = conn.connection.dbapi_connection
    if dbapi is None or not hasattr(dbapi, "pgconn"):
        yield
        return
    dbapi.autocommit = True
    try:
        yield
    finally:
        try:
            dbapi.autocommit = False
        except Exception:  # noqa: BLE001 - a connection left in autocommit must not be pooled
            conn.invalidate()
