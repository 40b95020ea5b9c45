"""Transcript items of a streaming agent, kept by a writer of their own: the lines that arrive
while one transaction commits go together in the next, so a chatty agent costs a transaction
per batch rather than per line, and an idle one still has each line kept as it comes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from core.agents.values import TranscriptItem

BATCH: int = 500
"""Items at most in one transaction: a burst is kept in bounded steps, never one huge write."""


class ItemQueue:
    """Items put here are written by `write` on a thread of the queue's own, in order; `flush`
    returns once everything put before it is written. A failed write is raised by the next
    `put` or `flush` (the turn that fed it learns of it), and nothing after it is written."""

    def __init__(self, write: Callable[[Sequence[TranscriptItem]], None]) -> None:
        self._write = write
        self._pending: list[TranscriptItem] = []
        self._busy = False
        self._closed = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        """Started by the first `put`: most exec turns say nothing worth a writer."""

    def put(self, items: Sequence[TranscriptItem]) -> None:
        with self._cond:
            self._raise()
            if self._closed:
                return  # stopped: what comes now is dropped, as what was pending was
            self._pending.extend(items)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="transcript-writer", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def flush(self) -> None:
        with self._cond:
            while (self._pending or self._busy) and self._error is None:
                self._cond.wait()
            self._raise()

    def close(self) -> None:
        """Flush, then stop the writer; raises what a write raised."""
        try:
            self.flush()
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop the writer after the write in progress; what is still pending is dropped (the
        turn is ending with an error of its own)."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
                self._busy = True
            try:
                self._write(batch)
            except BaseException as exc:  # noqa: BLE001 - handed to the turn's thread
                with self._cond:
                    self._error = exc
                    self._pending.clear()
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
