"""Transcript items of a streaming agent, kept by a writer of their own: the lines that arrive
while one transaction commits go together in the next, so a chatty agent costs a transaction
per batch rather than per line, and an idle one still has each line kept as it comes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Final

from core.agents import spare
from core.agents.values import TranscriptItem
from core.logs import logger

BATCH: int = 500
"""Items at most in one transaction: a burst is kept in bounded steps, never one huge write."""
PENDING: Final = 2 * BATCH
"""Items at most waiting for the writer: past it `put` waits (and so does the agent, on its
full pipe), so a burst faster than the database never piles up in the worker's memory."""
TURN_ITEMS: Final = 5000
"""What an agent says in one turn that the transcript keeps, in items: past it the rest is
counted and dropped, and one item says how much (a turn of a million lines is not a million
rows)."""


class ItemQueue:
    """Items put here are written by `write` on a thread of the queue's own, in order; `flush`
    returns once everything put before it is written. A failed write is raised by the next
    `put` or `flush` (the turn that fed it learns of it), and nothing after it is written.

    `inline`: no thread; the one thread that puts items also writes them, at its `flush`
    (and as soon as a batch is full): for a caller that is idle between the items it is handed
    and can flush whenever it has handled all it has (an ACP turn's `on_idle`). What arrived
    while a write committed is written together at the next flush, as the writer thread
    batches it, without a thread switch per item (issue 45)."""

    def __init__(
        self,
        write: Callable[[Sequence[TranscriptItem]], None],
        *,
        limit: int = TURN_ITEMS,
        inline: bool = False,
    ) -> None:
        self._write = write
        self._inline = inline
        self._limit = limit
        self._taken = 0
        self.dropped = 0
        """Items put past `limit`: not kept."""
        self._pending: list[TranscriptItem] = []
        self._busy = False
        self._closed = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._writing = False
        """The writer runs (a spare thread's job, `core.agents.spare`), started by the first
        `put`: most exec turns say nothing worth a writer."""

    def put(self, items: Sequence[TranscriptItem]) -> bool:
        """Queue `items` for the writer; False when they are past the turn's limit (dropped,
        counted) or the queue is stopped."""
        full = False
        with self._cond:
            self._raise()
            while (
                len(self._pending) >= PENDING
                and not self._inline
                and not self._closed
                and self._error is None
            ):
                self._cond.wait()
            self._raise()
            if self._closed:
                return False  # stopped: what comes now is dropped, as what was pending was
            room = max(0, self._limit - self._taken)
            if len(items) > room:
                if not self.dropped:
                    self._pending.append(
                        TranscriptItem(
                            "log",
                            f"transcript cut: a turn keeps at most {self._limit} items; "
                            "what the agent says after this is counted, not kept",
                            {"level": "warning", "limit": self._limit},
                        )
                    )
                self.dropped += len(items) - room
                items = items[:room]
            self._taken += len(items)
            self._pending.extend(items)
            if self._inline:
                full = len(self._pending) >= BATCH
            elif self._pending:
                # past the limit nothing is added: the writer is not woken for nothing, a
                # thread switch per dropped line (issue 45)
                self._ensure_writer()
                self._cond.notify_all()
        if self._inline and full:
            self._write_inline(whole=False)
        return bool(items)

    def note(self, note: TranscriptItem) -> None:
        """Queue laneway's own `note` about the turn (a stop that dropped output): kept past
        the turn's limit, as the limit's own notes are."""
        with self._cond:
            self._raise()
            if self._closed:
                return
            self._pending.append(note)
            self._ensure_writer()
            self._cond.notify_all()

    def flush(self) -> None:
        if self._inline:
            self._write_inline(whole=True)
            return
        with self._cond:
            while (self._pending or self._busy) and self._error is None:
                self._cond.wait()
            self._raise()

    def close(self) -> None:
        """Flush, then stop the writer; raises what a write raised. A turn past its limit
        ends with one more item saying how much was dropped."""
        try:
            if self.dropped:
                logger.bind(limit=self._limit, dropped=self.dropped).warning(
                    "agent transcript cut: items past the turn's limit were not kept"
                )
                with self._cond:
                    self._raise()
                    if not self._closed:
                        self._pending.append(
                            TranscriptItem(
                                "log",
                                f"transcript cut: {self.dropped} more items of this turn "
                                f"were not kept (at most {self._limit} a turn)",
                                {"level": "warning", "dropped": self.dropped},
                            )
                        )
                        self._ensure_writer()
                        self._cond.notify_all()
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
            while self._writing:
                self._cond.wait()

    def _write_inline(self, *, whole: bool) -> None:
        """Write what is pending (`whole`), or only its full batches."""
        self._raise()
        while self._pending and not self._closed and (whole or len(self._pending) >= BATCH):
            batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
            try:
                self._write(batch)
            except BaseException as exc:
                self._error = exc
                self._pending.clear()
                raise

    def _ensure_writer(self) -> None:
        if self._inline:
            return  # the caller's `flush` writes
        if not self._writing:
            self._writing = True  # under the lock, as `stop` reads it
            spare.run(self._run)

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            self._drain()
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()

    def _drain(self) -> None:
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
