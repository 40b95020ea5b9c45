"""One thread for every exec turn's pipes and exits (issue 45 item 4).

An exec turn waits on three things besides its own lines: its agent's stdout (read as it comes,
`exec_pipe`), its stderr (read to its end, only the tail kept) and its agent's exit (what the
agent moved out of its group and still holds its output open is swept then). Each was a job
handed to a thread of its own at the turn's start (three threads a running turn, a worker of
a hundred agents three hundred), and each thread woke apart at the turn's end. Here one
thread of the process waits on all of them at once (the system's selector, epoll on Linux;
the exit as a pidfd), so the end of a turn's output, of its stderr and of its agent is
usually one wake-up: a drain of quiet agents switched threads 9 times a run instead of 18,
and was preempted 2.7 times instead of 7 (its CPU and runs/s did not move measurably).

A descriptor is watched (`watch`) until it is unwatched; its callback runs on this thread
whenever it is readable or hung up, and must not block: descriptors are non-blocking, and a
call may find nothing to read (a descriptor closed and its number reused in between). A
callback that raises is logged and does not stop the others. `later` runs a job on this thread
after a delay, from any thread (a job armed earlier than every other wakes the thread through
a pipe of its own); the exec turns' deadlines (`exec._Keeper`) and the sweep after an agent's
exit are such jobs, so a process of exec turns has this one thread besides the turns' own.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import selectors
import threading
import time
from collections.abc import Callable

from core.logs import logger

Callback = Callable[[], None]


class Timer:
    """A job armed by `later`; `cancel` keeps it from running if it has not begun."""

    __slots__ = ("cancelled", "job")

    def __init__(self, job: Callback) -> None:
        self.job = job
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Reactor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._selector: selectors.BaseSelector | None = None
        self._callbacks: dict[int, Callback] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self._wake: tuple[int, int] | None = None
        self._thread: int | None = None

    def _started(self) -> selectors.BaseSelector:
        """The selector, made (and the thread started) on first use. Under `_lock`."""
        if self._selector is None:
            self._selector = selectors.DefaultSelector()
            self._wake = os.pipe()
            for fd in self._wake:
                os.set_blocking(fd, False)
            self._selector.register(self._wake[0], selectors.EVENT_READ)
            thread = threading.Thread(target=self._run, name="laneway-exec-io", daemon=True)
            thread.start()
            self._thread = thread.ident
        return self._selector

    def watch(self, fd: int, on_ready: Callback) -> None:
        """Call `on_ready` on the reactor's thread while `fd` is readable or hung up; `fd` is
        made non-blocking. From any thread: the selector takes a descriptor added while it
        waits."""
        os.set_blocking(fd, False)
        with self._lock:
            selector = self._started()
            self._callbacks[fd] = on_ready
            selector.register(fd, selectors.EVENT_READ)

    def unwatch(self, fd: int) -> None:
        """Stop watching `fd` (before it is closed: a closed descriptor's number may be
        someone else's next)."""
        with self._lock:
            self._callbacks.pop(fd, None)
            if self._selector is not None:
                with contextlib.suppress(OSError, KeyError, ValueError):
                    self._selector.unregister(fd)

    def close(self, fd: int) -> None:
        """Stop watching `fd` and close it, in that order (a descriptor's end: its number is
        free for someone else's next one only once nothing here maps it)."""
        self.unwatch(fd)
        os.close(fd)

    def later(self, delay: float, job: Callback) -> Timer:
        """Run `job` on the reactor's thread in `delay` seconds, unless cancelled first. From
        any thread: a job due before every other one wakes the thread (else it wakes for the
        earlier one and then computes its next wait)."""
        timer = Timer(job)
        when = time.monotonic() + delay
        with self._lock:
            self._started()
            first = not self._timers or when < self._timers[0][0]
            heapq.heappush(self._timers, (when, next(self._order), timer))
            wake = self._wake if first and threading.get_ident() != self._thread else None
        if wake is not None:
            with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending anyway
                os.write(wake[1], b"\0")
        return timer

    def _run(self) -> None:
        selector, wake = self._selector, self._wake
        assert selector is not None
        assert wake is not None
        while True:
            with self._lock:
                wait = max(0.0, self._timers[0][0] - time.monotonic()) if self._timers else None
            try:
                ready = selector.select(wait)
            except (OSError, ValueError):  # closed: a forked child's copy (`_forgotten`)
                return
            for key, _events in ready:
                if key.fd == wake[0]:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake[0], 4096)
                    continue
                # the descriptor's callback now, not when the selector saw it ready: a
                # number closed and reused in between is its new owner's
                with self._lock:
                    callback = self._callbacks.get(key.fd)
                if callback is not None:
                    _call(callback)
            now = time.monotonic()
            with self._lock:
                due = []
                while self._timers and self._timers[0][0] <= now:
                    due.append(heapq.heappop(self._timers)[2])
            for timer in due:
                if not timer.cancelled:
                    _call(timer.job)

    def forget(self) -> None:
        """In a forked child: none of the parent's threads is here, and its selector is the
        parent's too (a descriptor of the same epoll on Linux): let go of it."""
        if self._selector is not None:
            with contextlib.suppress(OSError):
                self._selector.close()
        for fd in self._wake or ():
            with contextlib.suppress(OSError):
                os.close(fd)


def _call(callback: Callback) -> None:
    try:
        callback()
    except BaseException as exc:  # noqa: BLE001 - a callback handles its own; this is a bug
        logger.bind(cause=f"{type(exc).__name__}: {exc}").opt(exception=exc).error(
            "an exec turn's pipe or exit callback failed"
        )


reactor = Reactor()
"""The process's one reactor (its thread starts with the first `watch` or `later`)."""


def _forgotten() -> None:
    global reactor
    old, reactor = reactor, Reactor()
    old.forget()


os.register_at_fork(after_in_child=_forgotten)
