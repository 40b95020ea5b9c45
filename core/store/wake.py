"""SQLite's cross-process wake-up: a datagram to every waiting process after an event commits.

PostgreSQL tells a waiter of a commit with LISTEN/NOTIFY; SQLite has no such thing, and every
process that follows the board (`serve`'s event stream, `laneway watch`, a run waiting on a
person's answer) polled it. A SQLite board lives on one machine, so the processes using it
can talk through the file system beside it:

- A waiter binds a Unix datagram socket of its own in `<board.db>.wake/` (`Waiter`), named
  by its pid and a random token so a name is never reused.
- A transaction that wrote events sends one byte to every socket there, non-blocking, AFTER
  its COMMIT (`Notifier.committed`): a woken waiter finds the rows. A full socket buffer
  (EAGAIN) means that waiter is already due to wake; a refused send (ECONNREFUSED) means its
  process died, so the sender unlinks the socket; a vanished one (ENOENT) is forgotten.
- A waiter `select()`s on its socket with the old poll as a long fallback (`FALLBACK_S`), so
  a missed wake (a writer killed between COMMIT and its sends) costs latency, never an event.

Why this and not the alternatives: a stat of the write-ahead log every few milliseconds (what
`serve` did) is a poll with a floor of its period and costs every idle waiter CPU; inotify on
the WAL wakes on every page write of every transaction, not on commits of events, is Linux
only and misses checkpoints that truncate the log; a named pipe per board has one reader, and
a dead writer holding it open blocks the others. A socket per waiter holds no lock and no
shared state: a process that dies, at any point, leaves at most its own socket file, which the
next sender removes.

Nothing here costs a process that does not wait: a one-shot command that commits an event
pays one failed `stat` of the directory when nobody waits (no socket module imported, nothing
created). A path too long for AF_UNIX (107 bytes) moves the directory to
`/tmp/laneway-<uid>/<hash of the board's path>.wake`; a directory that cannot be made or bound
in (read-only, not a directory, a symlink) leaves the waiter polling, with one warning.
Entries in the directory that are not sockets are ignored; symlinks are never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from core import faults

if TYPE_CHECKING:
    import socket

SUFFIX: Final = ".wake"
FALLBACK_S: Final = 1.0
"""How long a waiter with a socket waits with no wake-up before it re-reads anyway."""
SUN_PATH_MAX: Final = 103 if sys.platform == "darwin" else 107
"""sun_path is 108 bytes with its terminating NUL (104 on macOS)."""
_NAME_MAX: Final = 24
"""A socket's name: `<pid>-<8 hex>`, a pid being at most 7 digits on Linux."""
_RECENT_NS: Final = 2_000_000_000
"""A directory changed this recently is listed again on every commit: its mtime ticks
coarsely (a kernel jiffy), so a socket bound in the same tick as the last listing would not
change what the sender sees."""

_warned: set[tuple[str, str]] = set()


def directory(db: Path) -> tuple[Path, bool]:
    """Where the board at `db` keeps its waiters' sockets (the same for every process), and
    whether that is the private fallback under /tmp (its path beside the board too long)."""
    real = os.path.realpath(db)
    beside = real + SUFFIX
    if len(os.fsencode(beside)) + 1 + _NAME_MAX <= SUN_PATH_MAX:
        return Path(beside), False
    import hashlib

    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:24]
    return Path(f"/tmp/laneway-{os.getuid()}") / f"{digest}{SUFFIX}", True


def _warn_once(where: Path, reason: str) -> None:
    key = (str(where), reason)
    if key in _warned:
        return
    _warned.add(key)
    from core.logs import logger

    logger.bind(directory=str(where), reason=reason).warning(
        "no wake-up socket for this SQLite board; waiting processes poll it instead"
    )


def _own_directory(path: Path, *, private: bool) -> bool:
    """Make `path` a directory (its parent too when `private`), or check the one there is a
    real directory (and, `private`, ours and closed to others); never through a symlink."""
    if private:
        parent = path.parent
        with contextlib.suppress(FileExistsError):
            os.mkdir(parent, 0o700)
        info = os.lstat(parent)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise NotADirectoryError(errno.ENOTDIR, "not a private directory", str(parent))
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)  # owner-only, as the board and its `.epochs` are
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    return True


class Waiter:
    """One waiting process's socket in the board's wake directory.

    `usable` is False when none could be had (the caller then polls as before). Bind it
    BEFORE reading what you wait for: a commit after the read then wakes you."""

    def __init__(self, db: Path) -> None:
        self.woken = 0
        """How many waits a wake-up ended (not the fallback): what tests assert on."""
        self._sock: socket.socket | None = None
        self._path: str | None = None
        self._pid = os.getpid()
        where, private = directory(db)
        try:
            _own_directory(where, private=private)
            import socket

            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            path = str(where / f"{os.getpid()}-{os.urandom(4).hex()}")
            try:
                sock.bind(path)
            except OSError:
                sock.close()
                raise
            sock.setblocking(False)
            self._sock, self._path = sock, path
        except OSError as exc:
            _warn_once(where, f"{type(exc).__name__}: {exc}")

    @property
    def usable(self) -> bool:
        return self._sock is not None

    def fileno(self) -> int:
        """The socket's descriptor, readable when woken (for an event loop's `add_reader`)."""
        if self._sock is None:
            raise ValueError("no wake-up socket")
        return self._sock.fileno()

    def drain(self) -> bool:
        """Take every pending wake-up; whether there was one."""
        sock = self._sock
        if sock is None:
            return False
        got = False
        while True:
            try:
                sock.recv(64)
            except OSError:  # BlockingIOError: nothing more
                break
            got = True
        if got:
            self.woken += 1
        return got

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` s for a wake-up; whether one came."""
        import select

        if self._sock is None:
            time.sleep(timeout)
            return False
        if self.drain():
            return True
        # poll(), not select(): a worker with many agents' pipes open has descriptors past
        # select's 1024, and a wait that failed at once would spin its caller
        poller = select.poll()
        try:
            poller.register(self._sock, select.POLLIN)
            ready = poller.poll(max(0.0, timeout) * 1000)
        except (OSError, ValueError):  # closed under us: a poll's worth of time, then a re-read
            time.sleep(timeout)
            return False
        return bool(ready) and self.drain()

    def close(self) -> None:
        sock, path = self._sock, self._path
        self._sock = self._path = None
        if path is not None and os.getpid() == self._pid:  # a forked child's is its parent's
            with contextlib.suppress(OSError):
                os.unlink(path)
        if sock is not None:
            sock.close()


class Notifier:
    """The sending side for one board (one per `Store`, used under its writer lock)."""

    def __init__(self, db: Path) -> None:
        self._db = db
        self._where: str | None = None
        self._seen: tuple[int, int] | None = None
        self._names: list[str] = []
        self._sock: socket.socket | None = None

    def committed(self) -> None:
        """Wake every waiter: call right after a COMMIT that wrote events."""
        if self._where is None:
            self._where = str(directory(self._db)[0])
        try:
            info = os.lstat(self._where)
        except OSError:
            return  # nobody ever waited on this board: the common case for a one-shot command
        if not stat.S_ISDIR(info.st_mode):
            return
        seen = (info.st_ino, info.st_mtime_ns)
        if seen != self._seen or time.time_ns() - info.st_mtime_ns < _RECENT_NS:
            self._names = self._list(self._where)
            self._seen = seen
        if not self._names:
            return
        sock = self._sock
        if sock is None:
            import socket

            sock = self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
        gone: list[str] = []
        for i, path in enumerate(self._names):
            if i == 1:
                faults.reach("wake.mid_notify")
            try:
                sock.sendto(b"\x01", path)
            except ConnectionRefusedError:
                # its process died: nobody will ever read it again
                with contextlib.suppress(OSError):
                    os.unlink(path)
                gone.append(path)
            except FileNotFoundError:
                gone.append(path)
            except OSError:
                pass  # EAGAIN: it is already due to wake; EACCES: another user's, it polls
        if gone:
            self._names = [p for p in self._names if p not in gone]

    @staticmethod
    def _list(where: str) -> list[str]:
        found: list[str] = []
        try:
            with os.scandir(where) as entries:
                for entry in entries:
                    try:
                        mode = entry.stat(follow_symlinks=False).st_mode
                    except OSError:
                        continue
                    if stat.S_ISSOCK(mode):
                        found.append(entry.path)
        except OSError:
            return []
        return found

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
