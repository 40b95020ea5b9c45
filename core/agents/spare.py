"""Threads kept for the next turn: each turn of an agent needs a transcript writer and an idle
watch for as long as it lasts, and starting two threads a turn was a sixteenth of a live ACP
turn (issue 45). A job handed to `run` goes to a thread left idle by an earlier one, or to a
new one; a thread idle for `IDLE_S` ends, and at most `KEEP` wait at once."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Final

from core.logs import logger

KEEP: Final = 16
IDLE_S: Final = 60.0

_idle: list[_Spare] = []
_lock = threading.Lock()


class _Spare:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="laneway-turn", daemon=True).start()

    def give(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=IDLE_S)
            except queue.Empty:
                with _lock:
                    if self in _idle:
                        _idle.remove(self)
                        return
                continue  # taken as it timed out: its job is on the way
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - a job handles its own; this is a bug
                logger.bind(cause=f"{type(exc).__name__}: {exc}").opt(exception=exc).error(
                    "a turn's thread job failed"
                )
            with _lock:
                if len(_idle) >= KEEP:
                    return
                _idle.append(self)


def _forgotten() -> None:
    """A forked child has none of its parent's threads: none of them is spare there."""
    global _lock
    _idle.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forgotten)


def run(job: Callable[[], None]) -> None:
    """Run `job` on a daemon thread: a spare one when there is one."""
    with _lock:
        spare = _idle.pop() if _idle else None
    if spare is None:
        spare = _Spare()
    spare.give(job)
