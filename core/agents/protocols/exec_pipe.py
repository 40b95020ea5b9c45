"""An exec agent's stdout, drained apart from what is done with it (issue 45 item 2).

The process's exec reactor (`Pipe.start`, core.agents.protocols.exec_reactor: one thread
for every turn's pipes) only reads the pipe, in chunks of up to `READ` bytes, into a
buffer; the turn's thread takes the buffer's chunks (`Pipe.lines`), splits them into lines and
does each line's work (JSON, bounds, the item writer). Measured before: the reader, the line
work and the item writer shared one GIL at 25 µs of CPU per kept line against the agent's 9 µs
per printed line, so a chatty agent waited on its full 64 KiB pipe, 4.5-10x slower than with a
bare reader. Now the agent waits only when the buffer holds `BOUND` bytes not yet processed:
then reading pauses (the pipe's own back-pressure, with one warning), so the worker's memory
stays bounded whatever the agent writes. The pipe itself is enlarged (`enlarge`, Linux) so a
reader waiting a few milliseconds for the GIL never lets the agent block.

Stopped (`abandon`: the agent was killed, the turn cancelled or timed out), what is buffered
and not yet processed is dropped, counted in `unread`, rather than written: a stop does not wait
for a backlog of megabytes to become items. The reader still reads the pipe to its end (and
drops it), so the turn's end knows when the agent's output has ended.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Final

from core.agents.protocols import exec_reactor
from core.logs import logger

READ: Final = 1024 * 1024
"""Bytes at most one read of the pipe takes."""
BOUND: int = 16 * 1024 * 1024
"""Bytes read from the pipe and not yet processed, at most: past it reading pauses and the
agent waits on its full pipe. 16 MiB is 370,000 short lines, seconds of a chatty agent's
output, and keeps a flooding agent's worker within issue 38's memory bound (48 MiB over a
quiet one's: the buffer, a chunk and a line cap)."""
_VIEW: Final = memoryview(bytearray(READ))
"""The buffer every read takes into: reads happen on the reactor's one thread only."""
PIPE_SIZE: Final = 1024 * 1024
"""The pipe's capacity asked for (at most the system's `fs.pipe-max-size`): 64 KiB by default,
a few milliseconds of a chatty agent."""


class Pipe:
    """One agent's stdout: `start` drains it on the reactor's thread; `lines` yields its lines
    in order on the caller's thread."""

    def __init__(self, fd: int, *, bound: int | None = None) -> None:
        # a descriptor of its own: the reader's pipe stays open (and valid) until it has read
        # to the end, whoever closes the Popen's file object meanwhile
        self._fd = os.dup(fd)
        self._bound = BOUND if bound is None else bound
        self._chunks: collections.deque[bytes] = collections.deque()
        self._cond = threading.Condition()
        self.buffered = 0
        """Bytes read and not yet taken by `lines`."""
        self.peak = 0
        """The most `buffered` has been (the bound's witness)."""
        self.held = threading.Event()
        """Set when reading paused at the bound (the pipe's back-pressure applies)."""
        self.unread = 0
        """Bytes of the agent's output dropped unprocessed after `abandon`."""
        self.read_bytes = 0
        """Bytes read from the pipe so far."""
        self._abandoned = False
        self._ended = False
        self._paused = False
        self._partial = bytearray()
        self._over = 0

    def start(self) -> None:
        exec_reactor.reactor.watch(self._fd, self._readable)

    def abandon(self) -> None:
        """Stop: what is buffered is dropped (counted in `unread`), what comes is read and
        dropped; `lines` ends after the line it is on."""
        with self._cond:
            self._abandoned = True
            self._resume()
            self._cond.notify_all()

    def wait_ended(self) -> None:
        """Return once the pipe has been read to its end."""
        with self._cond:
            while not self._ended:
                self._cond.wait()

    def wait_read(self, size: int, timeout: float) -> bool:
        """Whether `size` bytes were read from the pipe within `timeout` seconds (or its end
        came): a test's hook for what the reader has done."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self.read_bytes >= size or self._ended, timeout=timeout
            )

    def _readable(self) -> None:
        """On the reactor's thread: read what the pipe holds, up to the bound."""
        with self._cond:
            room = READ if self._abandoned else min(READ, self._bound - self.buffered)
            if room <= 0:  # never left watched at the bound: a readable pipe would spin
                self._paused = True
                exec_reactor.reactor.unwatch(self._fd)
                return
        try:
            # into the one buffer of the reactor's thread: no megabyte allocated per read
            size = os.readv(self._fd, [_VIEW[:room]])
        except BlockingIOError:
            return  # nothing after all (the reactor may call once too often)
        except OSError:
            size = 0
        if not size:
            exec_reactor.reactor.close(self._fd)
            with self._cond:
                self._ended = True
                self._cond.notify_all()
            return
        chunk = bytes(_VIEW[:size])
        with self._cond:
            self.read_bytes += size
            if self._abandoned:
                self.unread += size
            else:
                self._chunks.append(chunk)
                self.buffered += size
                self.peak = max(self.peak, self.buffered)
                if self.buffered >= self._bound:
                    # the pipe's own back-pressure: the agent waits on it until `lines` takes
                    self._paused = True
                    exec_reactor.reactor.unwatch(self._fd)
                    if not self.held.is_set():
                        self.held.set()
                        logger.bind(bound=self._bound).warning(
                            "agent output backlog at its bound: reading paused until the "
                            "worker catches up (the agent waits on its pipe)"
                        )
            self._cond.notify_all()

    def _resume(self) -> None:
        """Under the lock: reading paused at the bound goes on (room was made, or what comes
        is dropped)."""
        if self._paused and (self._abandoned or self.buffered < self._bound):
            self._paused = False
            exec_reactor.reactor.watch(self._fd, self._readable)

    def lines(self, limit: int) -> Iterator[tuple[str, int]]:
        """The pipe's lines in order, decoded (UTF-8, bad bytes replaced), each with the bytes
        cut from it: a line longer than `limit` bytes yields its first `limit` and the count of
        the rest, which is never held. Ends at the pipe's end, or at `abandon` (the rest
        dropped)."""
        while True:
            with self._cond:
                while not self._chunks and not self._ended and not self._abandoned:
                    self._cond.wait()
                if self._abandoned:
                    self._drop()
                    return
                if not self._chunks:  # ended
                    break
                chunk = self._chunks.popleft()
                self.buffered -= len(chunk)
                self._resume()
                self._cond.notify_all()
            carried = len(self._partial)  # a line begun in the chunk before
            for at, (raw, cut) in enumerate(self._split(chunk, limit)):
                if self._abandoned:
                    with self._cond:
                        self.unread += self._rest(chunk, at) + (carried if at == 0 else 0)
                        self._drop()
                    return
                yield raw.decode("utf-8", "replace"), cut
        if self._partial or self._over:
            raw, cut = bytes(self._partial), self._over
            self._partial, self._over = bytearray(), 0
            yield raw.decode("utf-8", "replace"), cut

    def _drop(self) -> None:
        """Under the lock: what is buffered is dropped (abandoned)."""
        self.unread += self.buffered + len(self._partial)
        self._chunks.clear()
        self.buffered = 0
        self._partial = bytearray()
        self._cond.notify_all()

    def _rest(self, chunk: bytes, lines: int) -> int:
        """The bytes of `chunk` after its first `lines` newlines (lines not processed)."""
        at = -1
        for _ in range(lines):
            at = chunk.find(b"\n", at + 1)
            if at < 0:
                return 0
        return len(chunk) - at - 1

    def _split(self, chunk: bytes, limit: int) -> Iterator[tuple[bytes, int]]:
        """The lines `chunk` ends, the line it leaves open kept for the next."""
        start = 0
        if self._partial or self._over:  # a line begun in an earlier chunk
            end = chunk.find(b"\n")
            if end < 0:
                self._grow(chunk, 0, len(chunk), limit)
                return
            self._grow(chunk, 0, end, limit)
            line, cut = bytes(self._partial), self._over
            self._partial, self._over = bytearray(), 0
            yield line, cut
            start = end + 1
        last = chunk.rfind(b"\n")
        if last >= start:
            for raw in chunk[start:last].split(b"\n"):
                if len(raw) > limit:
                    yield raw[:limit], len(raw) - limit
                else:
                    yield raw, 0
            start = last + 1
        self._grow(chunk, start, len(chunk), limit)

    def _grow(self, chunk: bytes, start: int, end: int, limit: int) -> None:
        """The open line gains `chunk[start:end]`: up to `limit` bytes kept, the rest counted."""
        take = min(max(0, limit - len(self._partial)), end - start)
        if take:
            self._partial += chunk[start : start + take]
        self._over += end - start - take


def enlarge(fd: int) -> None:
    """Ask for a pipe of `PIPE_SIZE` bytes (Linux; as much as the system allows); a refusal
    (the user's pipe quota, another system) leaves the pipe as it was."""
    if not sys.platform.startswith("linux"):
        return
    import fcntl

    size = min(PIPE_SIZE, _PIPE_MAX)
    if size <= 0:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)


def _pipe_max() -> int:
    try:
        with open("/proc/sys/fs/pipe-max-size", "rb") as file:
            return int(file.read())
    except (OSError, ValueError):
        return 0


_PIPE_MAX = _pipe_max() if sys.platform.startswith("linux") else 0
