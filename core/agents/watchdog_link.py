"""The worker's side of its agent watchdog (core.agents.watchdog): one per process, started
with the first agent, told of every agent group as it starts and ends, and asked - when the
worker wakes from a pause - which of the stopped agents must die rather than run on.

Every call here is one non-blocking pipe write (microseconds) or nothing at all: where /proc is
absent, or once the watchdog is gone, they do nothing. A message that would block (the
watchdog stopped and its pipe full) is dropped rather than slow a run.

A watchdog that dies (killed, crashed) is started again at once by the thread that waited for
it, and told every agent group still live, so a pause of the worker after it is still a pause
of its agents; after `MAX_RESTARTS` it is not started again (one ERROR) and the worker works on
without one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from core.logs import logger

SCRIPT: Final = Path(__file__).with_name("watchdog.py")
MAX_RESTARTS: Final = 100
"""How many times a dead watchdog is started again in a worker's life."""
RETRY_S: Final = 1.0
"""How long a failed check after a pause waits before it is tried again (the agents stay
stopped meanwhile)."""

Check = Callable[[], Iterable[int]]
"""Run by the worker when it wakes from a pause, before any of its agents runs on: the
process groups to kill rather than resume."""


class Link:
    """A running watchdog: the pipe to it and the thread that answers it."""

    def __init__(self) -> None:
        self._pipes()
        self._mutex = threading.Lock()  # a write never goes to an fd closed and reused meanwhile
        self.alive = True
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._groups: set[int] = set()
        """The agent groups registered and not unregistered: told again to a new watchdog."""
        # Started off the run's path: what is said meanwhile waits in the pipe.
        self._thread = threading.Thread(target=self._serve, name="laneway-watchdog", daemon=True)
        self._thread.start()

    def _pipes(self) -> None:
        self._words, self._to = os.pipe()
        self._from, self._reply = os.pipe()
        os.set_blocking(self._to, False)

    def _spawn(self) -> subprocess.Popen[bytes] | None:
        # Only what the interpreter itself may need: never the worker's environment.
        env = {k: v for k, v in os.environ.items() if k == "LD_LIBRARY_PATH"}
        try:
            return subprocess.Popen(
                [sys.executable, "-I", "-S", str(SCRIPT), str(os.getpid())],
                stdin=self._words,
                stdout=self._reply,
                env=env,
                cwd="/",
                start_new_session=True,  # not stopped by a stop of the worker's group
            )
        except OSError as exc:
            logger.bind(cause=str(exc)).warning("agent watchdog could not be started")
            with self._mutex:
                self.alive = False
                os.close(self._to)
            return None
        finally:
            os.close(self._words)
            os.close(self._reply)

    def say(self, word: str) -> None:
        with self._mutex:
            if word[:1] == "+":
                self._groups.add(int(word[1:]))
            elif word[:1] == "-":
                self._groups.discard(int(word[1:]))
            if not self.alive:
                return
            try:
                os.write(self._to, f"{word}\n".encode())
                return
            except BlockingIOError:
                pass
            except OSError:
                self.alive = False
                return
        logger.bind(word=word).warning("agent watchdog not reading; a message to it dropped")

    def close(self) -> None:
        """End the watchdog as the worker's end would: it kills the groups it still knows."""
        with self._mutex:
            if self.alive:
                self.alive = False
                os.close(self._to)

    def _serve(self) -> None:
        while True:
            self.proc = self._spawn()
            with os.fdopen(self._from, "rb") as answers:
                if self.proc is None:
                    return
                for line in answers:
                    word, _, number = line.decode().partition(" ")
                    if word == "woke":
                        self.say(f"resume {number.strip()} {' '.join(map(str, self._kill()))}")
            code = self.proc.wait()
            with self._mutex:
                if not self.alive:
                    return  # closed: this worker ends
                if self.restarts >= MAX_RESTARTS:
                    self.alive = False
                    os.close(self._to)
                    logger.bind(exit_code=code, restarts=self.restarts).error(
                        "agent watchdog ended and is not started again: a pause of this worker"
                        " no longer pauses its agents"
                    )
                    return
                self.restarts += 1
                os.close(self._to)
                self._pipes()
                groups = sorted(self._groups)
                # in the new pipe before the new watchdog reads it: it knows every live agent
                for group in groups:
                    os.write(self._to, f"+{group}\n".encode())
            logger.bind(exit_code=code, groups=groups, restarts=self.restarts).warning(
                "agent watchdog ended; started again"
            )

    def _kill(self) -> list[int]:
        while True:
            try:
                return sorted({group for check in list(_checks) for group in check()})
            except Exception as exc:  # noqa: BLE001 - the agents stay stopped until it is known
                logger.bind(cause=f"{type(exc).__name__}: {exc}").error(
                    "could not tell which paused agents may run on; trying again"
                )
                time.sleep(RETRY_S)


_lock = threading.Lock()
_link: Link | None = None
_checks: list[Check] = []
_usable = os.path.exists(f"/proc/{os.getpid()}/stat")


def _forked() -> None:
    global _link, _lock  # a forked child's agents are its own, watched by a watchdog of its own
    _link, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forked)


def _started() -> Link | None:
    global _link  # one watchdog per process, started on first use
    if _link is not None or not _usable:
        return _link
    with _lock:
        if _link is None:
            try:
                _link = Link()
            except OSError as exc:  # out of file descriptors: the agents run unwatched
                logger.bind(cause=str(exc)).warning("agent watchdog could not be started")
                return None
    return _link


def announce() -> None:
    """An agent is about to start (the watchdog starts with the first one)."""
    link = _started()
    if link is not None:
        link.say("~")


def track(group: int | None) -> None:
    """The announced agent runs in process group `group`; None: it did not start."""
    if _link is not None:
        _link.say("!" if group is None else f"+{group}")


def untrack(group: int) -> None:
    """Agent group `group` is killed or ends: call before its leader is reaped, so the watchdog
    never signals a reused pid."""
    if _link is not None:
        _link.say(f"-{group}")


def attend(check: Check) -> Callable[[], None]:
    """Have `check` answer the watchdog when this process wakes from a pause (a worker loop
    does: it knows which runs' claims are lost); with none, every stopped agent resumes.
    Returns the undo."""
    _checks.append(check)

    def undo() -> None:
        with contextlib.suppress(ValueError):
            _checks.remove(check)

    return undo
