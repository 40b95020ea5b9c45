"""Epoch liveness: which processes working a board are alive, decided by locks, never by time.

Every writer process mints a random epoch and holds a lock on it for its whole life:

- SQLite: an exclusive OS lock (flock) on `<database>.epochs/<epoch>.lock`, where `<database>`
  is the file's resolved path, so a symlinked or relative spelling of the same database finds
  the same lock files;
- PostgreSQL: a session-level advisory lock keyed from the epoch, on a connection of its own.

An epoch is dead exactly when nobody holds its lock: a process that dies, however it dies,
releases it, and no heartbeat, lease or timeout is involved. A dead epoch never comes back, so
"dead" is cached and a compare-and-set naming that epoch is safe to issue after the test.

A holder checks that its own lock still holds (`EpochKeeper.current()`) before it claims
anything: the lock file deleted or replaced under it, or its PostgreSQL lock connection
terminated, means others may already have declared it dead; it then fences itself by minting
a new epoch and carries on under that one, finishing nothing further under the old.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from core import hosts, ids
from core.errors import DatabaseUnusable
from core.logs import logger
from core.store import dialect
from core.store import tables as t

WATCH_POLL_S = 0.25
"""How often a watched lock is checked when nothing signals its loss sooner (`EpochKeeper.watch`):
well under the half second a worker waits between looks for dead epochs' runs."""
HELD_FRESH_S = WATCH_POLL_S
"""A claim takes the lock as held without a round trip when the server answered on its
connection this recently and has said nothing since (`EpochLock.held_lately`): the watch
confirms it every `WATCH_POLL_S`, so a busy worker's claims cost no `SELECT 1` each, while a
terminated backend's goodbye still fences the very next claim. A claim made under an epoch
lost within that window is refused at its first outcome write, as every write is fenced."""
SERVER_MARGIN_S = 10
"""How much longer than this process (`dialect.TCP_USER_TIMEOUT_MS`) the server is asked to
wait on a silent liveness lock connection before it drops it and frees the lock
(`server_gives_up_s`): the time a cut-off worker has to find its lock lost and stop its agents
before another worker may re-claim its runs. Its watcher asks every `WATCH_POLL_S`, so it
notices within its timeout + 0.25 s and stops its agents in milliseconds; 10 s is the margin."""
# "laneway" as an integer: the schema lock, held only while a process migrates.
SCHEMA_LOCK_KEY = 0x6C616E65776179
_PG_HELD = sa.text(
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid::bigint = :hi AND objid::bigint = :lo"
)

_END_HOLDER = (
    "SELECT bool_or(pg_terminate_backend(pid{wait})) FROM pg_locks WHERE locktype = 'advisory' "
    "AND granted AND objsubid = 1 AND pid = :pid "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid::bigint = :hi AND objid::bigint = :lo"
)
_PG_END_HOLDER = sa.text(_END_HOLDER.format(wait=""))
_PG_END_HOLDER_WAITING = sa.text(_END_HOLDER.format(wait=", :wait_ms"))
"""PostgreSQL 14 and later: `pg_terminate_backend` waits (at most `END_WAIT_MS`) until the
backend has exited, so its lock is released when the statement answers; without the wait it
only signals the backend, and another process could still read the lost epoch as alive for
as long as the backend takes to exit (CI: the very next read)."""
END_WAIT_MS = 5000


def new_epoch() -> str:
    # Random, never a pid or a clock reading: two lives of one process must never share one.
    return secrets.token_hex(16)


def pg_key(epoch: str) -> int:
    """The advisory lock key of an epoch: 60 bits of a digest of it, a positive bigint."""
    return int(hashlib.sha256(epoch.encode()).hexdigest()[:15], 16)


def epochs_dir(url: URL) -> Path | None:
    """Where a SQLite database's liveness files live; None for in-memory and PostgreSQL."""
    if not dialect.is_sqlite(url):
        return None
    path = dialect.sqlite_path(url)
    if path is None:
        return None
    resolved = path.resolve()
    return resolved.with_name(resolved.name + ".epochs")


class LockLost(RuntimeError):
    """This process's own liveness lock no longer holds."""


# -- holding a lock ------------------------------------------------------------------------------


class EpochLock:
    """The lock one epoch holds for as long as its process lives (or until `release`)."""

    def __init__(
        self,
        epoch: str,
        *,
        fd: int | None = None,
        path: Path | None = None,
        connection: Connection | None = None,
    ) -> None:
        self.epoch = epoch
        self._fd = fd
        self._path = path
        self._connection = connection
        self._confirmed = -HELD_FRESH_S
        """When the server last answered on the lock connection (monotonic)."""
        self.backend_pid: int | None = None
        """PostgreSQL: the server process holding the lock (its session's `pg_backend_pid()`)."""

    @classmethod
    def take(cls, url: URL, engine: Engine, epoch: str) -> EpochLock:
        directory = epochs_dir(url)
        if dialect.is_sqlite(url):
            if directory is None:
                return cls(epoch)  # in-memory: one connection, one process
            directory.mkdir(mode=0o700, exist_ok=True)
            path = directory / f"{epoch}.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BaseException:
                os.close(fd)
                raise
            os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
            return cls(epoch, fd=fd, path=path)
        # Autocommit: the lock is the session's, and the liveness check before every claim
        # (`holds`) is then one round trip, not BEGIN, SELECT 1 and COMMIT.
        conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            conn.exec_driver_sql(_session_settings(conn, url))
            got, backend = conn.execute(
                sa.text("SELECT pg_try_advisory_lock(:key), pg_backend_pid()"),
                {"key": pg_key(epoch)},
            ).one()
            conn.commit()
        except BaseException:
            conn.close()
            raise
        if not got:  # a 60-bit collision with a live epoch: the caller mints another
            conn.close()
            raise LockLost(f"epoch {epoch} is already locked")
        lock = cls(epoch, connection=conn)
        lock.backend_pid = int(backend)
        return lock

    def end_backend_of(self, lost: EpochLock) -> None:
        """PostgreSQL: end the server process that still holds `lost`'s lock, if one does.

        A lock this process found lost may still be held at the server: a network cut hides
        the connection's end from the server until it gives the connection up
        (`server_gives_up_s`; through a TCP proxy, whenever the proxy does). Its holder has
        already stopped what ran under it (`EpochKeeper._refence` tells the watchers first),
        so ending that backend now frees the old epoch's runs at once instead. Only a backend
        still holding exactly that epoch's lock is ended; a server that refuses (another role's
        backend) leaves it to its timeouts, with one INFO."""
        if self._connection is None or lost.backend_pid is None:
            return
        key = pg_key(lost.epoch)
        values = {"pid": lost.backend_pid, "hi": key >> 32, "lo": key & 0xFFFFFFFF}
        waits = _server_major(self._connection) >= 14
        try:
            ended = self._connection.execute(
                _PG_END_HOLDER_WAITING if waits else _PG_END_HOLDER,
                {**values, "wait_ms": END_WAIT_MS} if waits else values,
            ).scalar()
            self._connection.commit()
        except sa.exc.SQLAlchemyError as exc:
            logger.bind(epoch=lost.epoch, cause=f"{type(exc).__name__}: {exc}").info(
                "could not end the server process still holding a lost liveness lock"
            )
            return
        if ended:
            logger.bind(epoch=lost.epoch, backend_pid=lost.backend_pid).info(
                "ended the server process still holding this process's lost liveness lock"
            )

    def holds(self) -> bool:
        """True while the lock is still ours: the file at its path is the one we locked, or
        the PostgreSQL lock connection still answers - a server gone silent (a partition) is
        an error within `dialect.TCP_USER_TIMEOUT_MS`, not a wait of the kernel's minutes."""
        if self._fd is not None and self._path is not None:
            try:
                on_disk = os.stat(self._path)
            except OSError:
                return False
            mine = os.fstat(self._fd)
            return (on_disk.st_ino, on_disk.st_dev) == (mine.st_ino, mine.st_dev)
        if self._connection is not None:
            try:
                self._connection.exec_driver_sql("SELECT 1").scalar()
                self._connection.commit()
            except sa.exc.SQLAlchemyError:
                return False
            if self._connection.closed:
                return False
            self._confirmed = time.monotonic()
            return True
        return True

    def held_lately(self) -> bool:
        """PostgreSQL: the server answered on the lock connection less than `HELD_FRESH_S` ago
        and has said nothing since (a terminated backend's goodbye makes its socket readable):
        `holds` would ask the server what it just said. A look at the socket, no round trip."""
        if self._connection is None or time.monotonic() - self._confirmed >= HELD_FRESH_S:
            return False
        return not dialect.connection_spoken_unasked(self._connection, unknown=True)

    def wait_signal(self, timeout: float, wake: int | None = None) -> None:
        """Wait up to `timeout` for a sign the lock may be gone; the caller then asks `holds`.
        The wait also ends when `wake` (a pipe's read end) turns readable: the watch is ending.

        PostgreSQL: the lock connection's socket turning readable while nobody uses it is the
        server speaking unasked - a terminated backend, a shut-down server - so the loss is
        seen the moment the server says it, not at the next claim. SQLite: nothing signals a
        lock file deleted or replaced; the wait is the poll of its inode."""
        fd = self._socket()
        if fd is None and wake is None:
            time.sleep(timeout)
            return
        # poll(), not select(): select() cannot watch a descriptor numbered 1024 or more, which a
        # worker with many agents' pipes open reaches
        watch = select.poll()
        if fd is not None:
            watch.register(fd, select.POLLIN | select.POLLPRI)
        if wake is not None:
            watch.register(wake, select.POLLIN)
        with contextlib.suppress(OSError, ValueError):
            watch.poll(timeout * 1000)

    def _socket(self) -> int | None:
        if self._connection is None or self._connection.closed:
            return None
        try:
            raw = self._connection.connection.dbapi_connection
            fileno = getattr(raw, "fileno", None)
            return int(fileno()) if fileno is not None else None
        except (sa.exc.SQLAlchemyError, OSError, ValueError, TypeError, AttributeError):
            return None

    def release(self) -> None:
        if self._fd is not None:
            # Unlink while still holding the lock, so nobody finds a free file mid-way.
            if self._path is not None and self.holds():
                with contextlib.suppress(OSError):
                    os.unlink(self._path)
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._connection is not None:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                self._connection.execute(
                    sa.text("SELECT pg_advisory_unlock(:key)"), {"key": pg_key(self.epoch)}
                )
                self._connection.commit()
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                self._connection.close()
            self._connection = None


def _session_settings(conn: Connection, url: URL) -> str:
    """The settings of the liveness lock connection: its name, no `idle_session_timeout`
    (PostgreSQL 14 on), and the server's own bound on a silent peer (`_server_gives_up`).

    A lock connection (this one, the schema lock's) sits idle between the asks of its holder -
    a paused worker, a migration running on another connection - and a server ending it for
    that would free the lock of a live process; it ends with its process all the same. The
    writer and the pooled connections keep the server's timeout: they are replaced when the
    server ended them (core.store.database)."""
    return (
        f"{_no_idle_timeout(conn)}{_server_gives_up(conn, url)}"
        f"SET application_name = 'laneway pid {os.getpid()}'"
    )


def server_gives_up_s(url: URL) -> int | None:
    """Seconds after which the server drops a liveness lock connection whose peer went silent
    (a network cut, a machine gone): this process's own `tcp_user_timeout` plus
    `SERVER_MARGIN_S` (15 s by default); None when the URL turns the client's bound off
    (`tcp_user_timeout=0`), and the server's settings then apply as they are."""
    own_ms = dialect.tcp_user_timeout_ms(url)
    if own_ms <= 0:
        return None
    return -(-own_ms // 1000) + SERVER_MARGIN_S


def _server_gives_up(conn: Connection, url: URL) -> str:
    """Ask the server, for this session only, to drop the connection once its peer has been
    silent `server_gives_up_s`: keepalive probes from a third of it on, one a second, and (from
    PostgreSQL 12) its own `tcp_user_timeout` for what it sent unacknowledged. Without this the
    server keeps a cut-off worker's backend, and so its advisory lock and the runs claimed
    under it, for its operating system's keepalive time: 7,200 + 9 x 75 s on Linux. All four
    settings are any user's to set for a session; over a Unix socket the server ignores them."""
    bound = server_gives_up_s(url)
    if bound is None:
        return ""
    idle = max(1, bound // 3)
    sql = (
        f"SET tcp_keepalives_idle = {idle}; SET tcp_keepalives_interval = 1; "
        f"SET tcp_keepalives_count = {max(1, bound - idle)}; "
    )
    if _server_major(conn) >= 12:
        sql += f"SET tcp_user_timeout = {bound * 1000}; "
    return sql


def _no_idle_timeout(conn: Connection) -> str:
    return "SET idle_session_timeout = 0; " if _server_major(conn) >= 14 else ""


def _server_major(conn: Connection) -> int:
    """The server's major version (0 when the dialect does not know it)."""
    major = (conn.dialect.server_version_info or (0,))[0]
    return major if isinstance(major, int) else 0


# -- testing someone else's lock -----------------------------------------------------------------


class Liveness:
    """Answers "is this epoch dead?" for one database. Dead answers are cached (final)."""

    def __init__(self, url: URL, engine: Engine) -> None:
        self._url = url
        self._engine = engine
        self._dir = epochs_dir(url)
        self._sqlite = dialect.is_sqlite(url)
        self._dead: set[str] = set()
        self._own: Callable[[], str | None] = lambda: None

    def follow(self, own: Callable[[], str | None]) -> None:
        """Tell the checker this process's own epoch (never dead to itself)."""
        self._own = own

    def own(self) -> str | None:
        """This process's epoch as last minted (no lock check), or None (read-only)."""
        return self._own()

    def is_dead(self, epoch: str | None, conn: Connection | None = None) -> bool:
        if epoch is None or epoch in self._dead:
            return True
        if epoch == self._own():
            return False
        dead = self._sqlite_dead(epoch) if self._sqlite else self._pg_dead(epoch, conn)
        if dead:
            self._dead.add(epoch)
        return dead

    def _sqlite_dead(self, epoch: str) -> bool:
        if self._dir is None:
            # In-memory: one process; an epoch that is not ours is a previous host's.
            return True
        path = self._dir / f"{epoch}.lock"
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return True
        except OSError:
            return False  # cannot tell: never mistake the living for the dead
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        else:
            # Free: its holder is gone. Clear the left-over while we hold it.
            with contextlib.suppress(OSError):
                os.unlink(path)
            return True
        finally:
            os.close(fd)

    def _pg_dead(self, epoch: str, conn: Connection | None) -> bool:
        key = pg_key(epoch)
        values = {"hi": key >> 32, "lo": key & 0xFFFFFFFF}
        if conn is not None:
            return int(conn.execute(_PG_HELD, values).scalar_one()) == 0
        with self._engine.connect() as own:
            return int(own.execute(_PG_HELD, values).scalar_one()) == 0


# -- this process's epoch ------------------------------------------------------------------------


class EpochKeeper:
    """This process's epoch and its lock; re-mints (fences) when the lock is lost."""

    def __init__(self, url: URL, engine: Engine, begin: Callable[[], Any]) -> None:
        self._url = url
        self._engine = engine
        self._begin = begin
        self._mutex = threading.RLock()
        self._on_lost: list[Callable[[str], object]] = []
        self._told: set[str] = set()
        self._lock: EpochLock | None = None
        self._worker = False
        self._lock = self._mint()

    @property
    def epoch(self) -> str:
        assert self._lock is not None
        return self._lock.epoch

    def current(self) -> str:
        """The epoch to claim under, after checking its lock still holds (fencing if not)."""
        with self._mutex:
            assert self._lock is not None
            if self._lock.held_lately() or self._lock.holds():
                return self._lock.epoch
            return self._refence()

    def _refence(self) -> str:
        """Under the mutex: the lock is lost; tell the watchers (they stop what ran under the
        old epoch) before minting the new one, so nothing of the old epoch's goes on while
        this process carries on under the new. When the database cannot be reached to mint,
        the lost lock stays in place and the next `current` tries again."""
        assert self._lock is not None
        old = self._lock
        if old.epoch not in self._told:
            self._told.add(old.epoch)
            for lost in list(self._on_lost):
                try:
                    lost(old.epoch)
                except Exception as exc:  # noqa: BLE001 - one watcher's failure stops no other
                    logger.bind(epoch=old.epoch, cause=f"{type(exc).__name__}: {exc}").error(
                        "a watcher of the liveness lock failed"
                    )
        new = self._mint()
        old.release()
        new.end_backend_of(old)
        self._lock = new
        logger.bind(old_epoch=old.epoch, epoch=new.epoch).warning(
            "liveness lock lost; this process fenced itself and continues under a new epoch"
        )
        return new.epoch

    def watch(
        self, on_lost: Callable[[str], object], poll: float = WATCH_POLL_S
    ) -> Callable[[], None]:
        """Call `on_lost(old_epoch)` the moment this process's lock is found lost (before the
        new epoch is minted), from a thread that watches the lock (`EpochLock.wait_lost`): the
        holder learns of the loss at least as soon as anyone who tests it. Returns the stop of
        the watch."""
        stop = threading.Event()
        # the end of the watch wakes its wait at once: a worker ending (`work()` returning,
        # `laneway worker --once` on an empty queue) does not sit out the rest of a poll
        wake, woken = os.pipe()
        self._on_lost.append(on_lost)

        def run() -> None:
            warned: set[str] = set()
            while not stop.is_set():
                lock = self._lock
                if lock is None:
                    return
                lock.wait_signal(poll, wake)
                if stop.is_set():
                    return
                with self._mutex:
                    if self._lock is not lock or lock.holds():
                        continue  # holds, or fenced already by a claim that looked first
                    try:
                        self._refence()
                    except Exception as exc:  # noqa: BLE001 - the database is away: try again
                        if lock.epoch not in warned:  # once per lost lock, not once per try
                            warned.add(lock.epoch)
                            logger.bind(cause=f"{type(exc).__name__}: {exc}").warning(
                                "liveness lock lost and no new epoch could be taken yet; retrying"
                            )
                stop.wait(poll)

        thread = threading.Thread(target=run, name="laneway-epoch-watch", daemon=True)
        thread.start()

        def end() -> None:
            if stop.is_set():  # ended already: its pipe may be closed and its numbers reused
                return
            stop.set()
            with contextlib.suppress(ValueError):
                self._on_lost.remove(on_lost)
            with contextlib.suppress(OSError):
                os.write(woken, b"x")
            thread.join(timeout=poll * 4 + 1)
            if not thread.is_alive():  # a thread still in its wait keeps the pipe it waits on
                os.close(wake)
                os.close(woken)

        return end

    def _mint(self) -> EpochLock:
        for _ in range(5):
            epoch = new_epoch()
            try:
                lock = EpochLock.take(self._url, self._engine, epoch)
            except (LockLost, FileExistsError):
                continue
            # The row is written only once the lock is held: an epoch anyone can read is live
            # until its lock is free.
            with self._begin() as conn:
                conn.execute(
                    sa.insert(t.host_epochs).values(
                        epoch=epoch,
                        pid=os.getpid(),
                        hostname=hosts.name()[:200],
                        opened_at=ids.now(),
                        worker=self._worker,
                    )
                )
            return lock
        raise LockLost("could not take a liveness lock for a new epoch")

    def mark_worker(self) -> None:
        """This process is a `worker` (it claims runs): its epoch row says so, and so will the
        row of any epoch it re-mints (the scheduler's "no worker alive on host H")."""
        with self._mutex:
            self._worker = True
            assert self._lock is not None
            with self._begin() as conn:
                conn.execute(
                    sa.update(t.host_epochs)
                    .where(t.host_epochs.c.epoch == self._lock.epoch)
                    .values(worker=True)
                )

    def close(self) -> None:
        with self._mutex:
            if self._lock is None:
                return
            epoch = self._lock.epoch
            # a database gone from under us (DatabaseUnusable) has no row to close
            with (
                contextlib.suppress(sa.exc.SQLAlchemyError, DatabaseUnusable),
                self._begin() as conn,
            ):
                conn.execute(
                    sa.update(t.host_epochs)
                    .where(t.host_epochs.c.epoch == epoch)
                    .values(closed_at=ids.now())
                )
            self._lock.release()
            self._lock = None


# -- the schema lock -----------------------------------------------------------------------------


@contextlib.contextmanager
def schema_lock(url: URL, engine: Engine) -> Iterator[None]:
    """Held only while a process creates or upgrades the schema, so two first openers do not
    migrate at once. Blocks (briefly) instead of refusing."""
    if dialect.is_sqlite(url):
        path = dialect.sqlite_path(url)
        if path is None:
            yield
            return
        resolved = path.resolve()
        fd = os.open(resolved.with_name(resolved.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
        return
    with engine.connect() as conn:
        # one round trip each way, as without the setting (the key is a constant)
        keep = _no_idle_timeout(conn)
        conn.exec_driver_sql(f"{keep}SELECT pg_advisory_lock({SCHEMA_LOCK_KEY})")
        conn.commit()
        try:
            yield
        finally:
            reset = "; RESET idle_session_timeout" if keep else ""  # the pool's again
            conn.exec_driver_sql(f"SELECT pg_advisory_unlock({SCHEMA_LOCK_KEY}){reset}")
            conn.commit()
