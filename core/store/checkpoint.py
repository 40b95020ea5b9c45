"""SQLite's WAL checkpoint, on a thread of the store's instead of inside a COMMIT.

With `journal_mode=WAL` and `synchronous=NORMAL` a COMMIT appends pages to the WAL and does
not wait for the disk; the one wait is the checkpoint, which SQLite runs by default inside the
COMMIT that takes the WAL past 1,000 pages: it syncs the WAL, copies the pages into the
database file and syncs that. On a shared disk that COMMIT then takes milliseconds instead of
tens of microseconds, and an Office arrival (some 30 pages over its two commits) meets one
every few dozen arrivals.

So the store's connections turn the automatic checkpoint off and this thread runs the same
checkpoint (PASSIVE: it never blocks a writer or a reader) once about as many pages have been
committed, on a connection of its own, with the GIL released while SQLite works. What a crash
can lose is unchanged: with synchronous=NORMAL a power loss may roll back the commits since
the WAL was last synced, whichever thread syncs it; a process crash loses no commit. When the
store closes, its last connection checkpoints what is left (SQLite does that on close).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Final

from loguru import logger

PAGES: Final = 1000
"""Pages per checkpoint: SQLite's own default for the automatic checkpoint."""
_FIRST_EVERY: Final = 32
"""Commits before the first checkpoint, until the pages per commit are known."""


class Checkpointer:
    """Runs `PRAGMA wal_checkpoint(PASSIVE)` on its own thread, started at the first commit."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._wake = threading.Condition()
        self._commits = 0
        self._every = _FIRST_EVERY
        self._closing = False
        self._thread: threading.Thread | None = None

    def committed(self) -> None:
        """A writer transaction committed: count it, and wake the thread when enough have."""
        self._commits += 1  # the writer lock serialises callers
        if self._commits < self._every:
            return
        with self._wake:
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(
                    target=self._run, name="laneway-checkpoint", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            logger.bind(cause=str(exc)).warning("WAL checkpoint thread could not connect")
            return
        try:
            conn.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
            last_log = 0
            while True:
                with self._wake:
                    while self._commits < self._every and not self._closing:
                        self._wake.wait()
                    if self._closing:
                        return
                    commits, self._commits = self._commits, 0
                try:
                    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:
                    logger.bind(cause=str(exc)).debug("WAL checkpoint not made")
                    continue
                log = int(row[1]) if row is not None and row[1] is not None else 0
                # pages committed since the last checkpoint: the WAL's growth, or all of it
                # when a writer has rewound it since
                fresh = log - last_log if log >= last_log else log
                last_log = log
                if fresh > 0:
                    # aim the next checkpoint at PAGES pages: commits * PAGES / pages seen
                    self._every = max(1, min(4096, commits * PAGES // fresh))
        finally:
            conn.close()

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
