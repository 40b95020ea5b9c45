"""The per-session guard: a session's failure bookkeeping runs under it, one at a time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class SessionGuards:
    """One lock per session in use, this process's."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[threading.Lock, int]] = {}
        """Per session in use: its lock and how many hold or wait for it."""
        self._lock = threading.Lock()

    @contextmanager
    def guard(self, session_id: str) -> Iterator[None]:
        """Held during a session's failure bookkeeping. Not reentrant, on purpose.

        A session's lock lives only while someone holds or waits for it: the last one out
        drops it, so a host that handles a million failures keeps no lock per session."""
        with self._lock:
            lock, users = self.held.get(session_id, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self.held[session_id] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._lock:
                _lock, users = self.held[session_id]
                if users <= 1:
                    del self.held[session_id]
                else:
                    self.held[session_id] = (lock, users - 1)

    def guard_held(self, session_id: str) -> bool:
        with self._lock:
            held = self.held.get(session_id)
        return held is not None and held[0].locked()
