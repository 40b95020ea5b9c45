"""A worker's agent watchdog: its agents pause with it, and die with it.

A worker's agents run in process groups of their own (core.agents.protocols.exec_process),
so a SIGSTOP of the worker - `kill -STOP`, Ctrl-Z, a debugger - stops the worker alone and
its agents run on.
If the worker's liveness lock is lost while it is paused, another worker re-claims the run and
would start it again beside the first agent. This process, one per worker, started when the
worker first launches an agent, closes that hole:

- the worker tells it on its stdin which agent groups are live: `~` before it starts an agent,
  `+<pgid>` once started (`!` if the start failed), `-<pgid>` when the agent is killed or
  reaped - one small pipe write each, never a wait;
- it reads `/proc/<worker>/stat` every `POLL_S` while any agent lives (taking in the worker's
  words at each look, so they never wake it); the moment the worker is
  stopped (state T or t) it SIGSTOPs every agent group it knows (and, when a start was
  announced and not confirmed yet, every group leader among the worker's children);
- when the worker runs again it does not resume them itself: it writes `woke <n>` on its stdout
  and waits for the worker's `resume <n> [<pgid>...]`. The worker first checks its liveness
  lock (fencing itself, and stopping the turns claimed under it, when it is lost) and names the
  groups of turns whose claim is lost: those are SIGKILLed while still stopped, the others get
  SIGCONT. So an agent whose run was re-claimed meanwhile never runs another instruction;
- when the worker is gone (its end of the pipe closed, its pid gone or reused) it SIGKILLs the
  groups it still knows and exits: beside the parent-death signal, which reaches an agent but
  not what the agent started.

It lives in a session of its own (a stop of the worker's process group or terminal does not
stop it too), is given no environment beyond the interpreter's needs (it never holds the
database URL or any secret), and imports nothing but the standard library: it runs as
`python -I -S <this file> <worker pid>`. Linux only (it needs /proc): elsewhere it is not
started and a paused worker's agents run on (docs/guarantees.md).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

POLL_S: Final = 0.02
"""How often the worker's state is read while any agent lives: the bound on how long a paused
worker's agents run on (docs/guarantees.md "A paused or partitioned worker")."""
STOPPED: Final = frozenset("tT")
HEAR_EVERY: Final = 25
"""While nothing is stopped, the worker's words are taken in every this many looks (half a
second): often enough that its pipe never fills."""

Act = tuple[str, frozenset[int]]
"""What the watchdog does next: ("stop" | "cont" | "kill", groups), or ("say", {n}): write
`woke <n>` to the worker."""


# -- reading /proc -------------------------------------------------------------------------------


def parse_stat(data: bytes) -> tuple[str, int, int, int]:
    """(state, ppid, pgrp, starttime) from the text of /proc/<pid>/stat; the command name in
    parentheses may itself hold spaces and parentheses, so fields are counted from the last
    `)`. ValueError when the text is not a stat line."""
    _, paren, rest = data.rpartition(b")")
    fields = rest.split()
    if not paren or len(fields) < 20:
        raise ValueError("not a /proc stat line")
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def read_stat(pid: int) -> tuple[str, int, int, int] | None:
    """`parse_stat` of a live process; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return parse_stat(stat.read())
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None


def child_groups(pid: int, own: int) -> frozenset[int]:
    """The process-group leaders among `pid`'s children, but `own` (this watchdog): what the
    worker may have just started as an agent and not registered yet."""
    children: set[int] = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as listed:
                children.update(int(c) for c in listed.read().split())
    except OSError:  # no `children` files in this kernel: look at every process's parent
        children = set()
        for name in os.listdir("/proc"):
            stat = read_stat(int(name)) if name.isdigit() else None
            if stat is not None and stat[1] == pid:
                children.add(int(name))
    leaders = set()
    for child in children - {own}:
        stat = read_stat(child)
        if stat is not None and stat[2] == child:
            leaders.add(child)
    return frozenset(leaders)


# -- deciding ------------------------------------------------------------------------------------


@dataclass
class Watch:
    """What the watchdog knows, and what it does on each word from the worker and each look at
    its state. No I/O: `serve` carries the acts out."""

    groups: set[int] = field(default_factory=set)
    """Agent groups the worker registered and has not unregistered."""
    pending: int = 0
    """Agent starts announced (`~`) and not yet confirmed or failed."""
    frozen: set[int] = field(default_factory=set)
    """Groups this watchdog stopped and has not resumed or killed."""
    phase: str = "running"
    """"running"; "frozen" (the worker is stopped); "waking" (it runs, its word is awaited)."""
    pause: int = 0
    """The number of the last pause the worker was asked about."""

    @property
    def polling(self) -> bool:
        return bool(self.groups or self.pending or self.phase != "running")

    def heard(self, line: str) -> list[Act]:
        """A line from the worker; a line it would never write is ignored."""
        word, _, rest = line.strip().partition(" ")
        try:
            if word == "~":
                self.pending += 1
            elif word == "!":
                self.pending = max(0, self.pending - 1)
            elif word[:1] == "+":
                group = int(word[1:])
                self.pending = max(0, self.pending - 1)
                self.groups.add(group)
                if self.phase == "frozen":  # written just before the worker stopped
                    self.frozen.add(group)
                    return [("stop", frozenset({group}))]
            elif word[:1] == "-":
                group = int(word[1:])
                self.groups.discard(group)
                self.frozen.discard(group)
            elif word == "resume":
                number, *kill = (int(n) for n in rest.split())
                return self._resume(number, frozenset(kill))
        except ValueError:
            pass
        return []

    def _resume(self, number: int, kill: frozenset[int]) -> list[Act]:
        acts: list[Act] = [("kill", kill)] if kill else []
        self.frozen -= kill
        self.groups -= kill
        if number == self.pause and self.phase == "waking":
            acts.append(("cont", frozenset(self.frozen)))
            self.frozen.clear()
            self.phase = "running"
        return acts  # an answer to an earlier pause: the worker stopped again since

    def saw(self, state: str, children: Callable[[], Iterable[int]]) -> list[Act]:
        """The worker's state letter now; `children` lists the group leaders among its
        children (asked only when an announced start is unconfirmed)."""
        if state in STOPPED:
            if self.phase == "frozen":
                return []
            found = set(children()) if self.pending else set()
            new = frozenset((self.groups | found) - self.frozen)
            self.frozen |= new
            self.phase = "frozen"
            return [("stop", new)] if new else []
        if self.phase != "frozen":
            return []
        if not self.frozen:
            self.phase = "running"
            return []
        self.phase = "waking"
        self.pause += 1
        return [("say", frozenset({self.pause}))]

    def gone(self) -> list[Act]:
        """The worker is gone: nothing it started may run on."""
        everything = frozenset(self.groups | self.frozen)
        self.groups.clear()
        self.frozen.clear()
        return [("kill", everything)] if everything else []


# -- the process ---------------------------------------------------------------------------------

_SIGNALS: Final = {"stop": signal.SIGSTOP, "cont": signal.SIGCONT, "kill": signal.SIGKILL}


def _carry_out(acts: list[Act], reply: int) -> None:
    for act, groups in acts:
        if act == "say":
            for number in groups:
                with contextlib.suppress(OSError):
                    os.write(reply, f"woke {number}\n".encode())
            continue
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, _SIGNALS[act])


def serve(worker: int, words: int = 0, reply: int = 1, poll: float = POLL_S) -> None:
    """Watch `worker` until it is gone, reading its words on fd `words`, answering on `reply`."""
    try:  # kept open: a look is one pread, and a dead worker's fd never shows its pid's reuse
        stat_fd = os.open(f"/proc/{worker}/stat", os.O_RDONLY)
    except OSError:
        stat_fd = -1  # gone already: what it said is killed
    own = os.getpid()
    watch = Watch()
    buffer = b""
    os.set_blocking(words, False)

    def hear() -> bool:
        """Take in whatever the worker wrote; False at end of file (the worker is gone)."""
        nonlocal buffer
        while True:
            try:
                chunk = os.read(words, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                _carry_out(watch.heard(line.decode(errors="replace")), reply)

    looks = 0
    while True:
        if watch.polling:
            # Not woken by each word: what the worker says waits in the pipe until it matters
            # (a stop, an answer awaited) or every HEAR_EVERY looks, so an agent's start and
            # end cost the worker a pipe write and nothing more, and a look is one pread.
            time.sleep(poll)
            looks += 1
            if (watch.phase != "running" or looks % HEAR_EVERY == 0) and not hear():
                break
        else:
            select.select([words], [], [])
            if not hear():
                break
        state = look(stat_fd)
        if state is None:
            break
        if state in STOPPED and not hear():  # what it wrote before it stopped counts
            break
        _carry_out(watch.saw(state, lambda: child_groups(worker, own)), reply)
    hear()
    _carry_out(watch.gone(), reply)


def look(stat_fd: int) -> str | None:
    """The state letter of the process whose /proc stat `stat_fd` is open; None when it is gone
    (exited, a zombie)."""
    try:
        data = os.pread(stat_fd, 4096, 0)
        state = chr(data[data.rindex(b")") + 2])  # the field after the command's parentheses
    except (OSError, ValueError, IndexError):
        return None
    return None if state in ("Z", "X") else state


def main(argv: list[str]) -> int:
    # Signals aimed at a terminal's jobs never reach this session; these would end it early.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    try:
        worker = int(argv[1])
    except (IndexError, ValueError):
        print("usage: watchdog.py <worker pid>", file=sys.stderr)
        return 2
    serve(worker)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
