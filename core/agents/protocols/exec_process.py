"""One agent turn as a subprocess.

The agent gets the prompt on stdin and identifying variables in its environment, and talks
back with JSON lines on stdout: ``{"decision": ..., "comment": ...}``, ``{"step_complete":
true}``, ``{"log": ...}``, ``{"usage": {"cost_usd", "input_tokens", "output_tokens"}}``. Any other
stdout line is transcript. Exit 0 ends the turn; exit 75
(EX_TEMPFAIL) is a transient failure worth retrying; anything else is a terminal failure.

An agent never outlives its worker. It runs in a process group of its own, which is killed
whenever the turn is stopped (and swept once the turn ends, for stray descendants); on Linux it
also gets a parent-death signal (`PR_SET_PDEATHSIG`), so SIGKILL reaches it when the worker
dies without a chance to clean up (kill -9, the OOM killer). Descendants the agent starts are
reached by the group kill on every stop, not by the parent-death signal, which the kernel sends
to direct children only; what left the group (a `setsid`, a double fork) is found at the turn's
end by the turn's own `LANEWAY_EXECUTION_ID` in its environment and killed
(`sweep_leftovers`). Its group is registered with the worker's watchdog
(core.agents.watchdog), which stops it while the worker is stopped and kills it when the
worker is gone.

The signal is asked for by util-linux's `setpriv --pdeathsig KILL` exec'ing the agent where
`setpriv` is installed (the agent keeps the pid it was started with), else by a pre-exec hook.
A pre-exec hook makes Python fork the whole worker and run Python in the child before exec; a
plain command line lets it use vfork: measured on the 2-core machine, starting `/bin/true` took
17-31 ms with the hook against 7.6 ms through `setpriv`. The command is looked up as exec
would (the agent's PATH, `cwd`) before, so one that cannot start still raises LaunchError with
exec's reason instead of becoming setpriv's exit status.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from core.agents import spare, watchdog_link
from core.text import MAX_TEXT

TRANSIENT_EXIT: Final = 75
EXECUTION_ENV: Final = "LANEWAY_EXECUTION_ID"
"""An exec turn's own mark in its agent's environment: what the agent starts inherits it."""
SWEEP_PASSES: Final = 20
HELD_OPEN_S: Final = 0.1
"""How long after the agent's exit its output may stay open before what holds it is swept:
an agent's output normally ends with it, and then the sweep after the turn is the only one."""
MESSAGE_KEYS: Final = frozenset({"decision", "step_complete", "log", "usage"})
STDERR_TAIL: Final = 2000
"""The characters of stderr a failure keeps (its last ones): stderr is read as it comes and
only its tail is held, whatever the agent writes."""
STDERR_KEEP: Final = 8000
"""The bytes of stderr held while the turn runs (the tail, decoded once at its end)."""
MAX_LINE: Final = 1024 * 1024
"""The bytes of one stdout line read whole. A longer line is never held: its first MAX_LINE
bytes are kept (a transcript line, cut to the item bound and saying so; never a message) and
the rest is read and dropped until its newline, so the worker's memory does not grow with
the agent's output."""
_CHUNK: Final = 65536


class LaunchError(Exception):
    """The command could not be started (missing binary, not executable, ...)."""


@attrs.frozen
class TurnResult:
    exit_code: int
    lines: int
    """Transcript lines the agent wrote (each went to `on_line` as it came; none is kept
    here)."""
    stderr_tail: str
    execution_id: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def transient(self) -> bool:
        return self.exit_code == TRANSIENT_EXIT

    def error_message(self) -> str:
        tail = self.stderr_tail.strip().splitlines()
        last = tail[-1] if tail else ""
        return f"agent exited with status {self.exit_code}" + (f": {last}" if last else "")


Message = Mapping[str, Any]


@attrs.define(eq=False)
class AgentProcess:
    """A running agent turn; `wait()` streams its messages to `on_message`."""

    popen: subprocess.Popen[bytes]
    execution_id: str
    on_message: Callable[[Message], None]
    on_line: Callable[[str], None] | None = None
    """Each transcript line as it arrives (the board keeps it while the turn runs)."""
    lines: int = 0
    read: threading.Event = attrs.field(factory=threading.Event)
    """Set when the agent's output has ended (`_sweep_on_exit` waits for it)."""

    def wait(self) -> TurnResult:
        stdout, stderr = self.popen.stdout, self.popen.stderr
        assert stdout is not None
        assert stderr is not None
        tail = bytearray()
        drained = threading.Event()

        def drain() -> None:
            try:
                _keep_tail(stderr, tail)
            finally:
                drained.set()

        # threads kept from earlier turns (core.agents.spare): starting one waits for the
        # new thread to be scheduled, a millisecond a start on a busy machine (issue 45)
        spare.run(drain)
        try:
            for line, cut in read_lines(stdout, MAX_LINE):
                self._handle(line.rstrip("\r"), cut)
        finally:
            self.read.set()
        # The agent has exited but is not reaped yet, so its pid (the group id) cannot have been
        # reused: sweep what it left behind in its group, then reap it.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOWAIT)
        kill_group(self.popen.pid)
        watchdog_link.untrack(self.popen.pid)
        # and what left the group since the sweep at the agent's exit: off the turn's path
        execution_id, pid = self.execution_id, self.popen.pid
        spare.run(lambda: _sweep_quietly(execution_id, pid))
        code = self.popen.wait()
        drained.wait()
        errors = bytes(tail).decode("utf-8", "replace")
        return TurnResult(code, self.lines, errors[-STDERR_TAIL:], self.execution_id)

    def _handle(self, line: str, cut: int) -> None:
        if cut:
            # never a message: what it meant lies in the part not read. Cut here to within
            # the item's bound, so the note of how much was dropped is what the board keeps.
            keep = MAX_TEXT - 100
            cut += len(line[keep:].encode("utf-8", "replace"))
            line = f"{line[:keep]}... [cut: {cut} more bytes of this line]"
        elif line.startswith("{"):
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict) and message.keys() & MESSAGE_KEYS:
                self.on_message(message)
                return
        self.lines += 1
        if self.on_line is not None:
            self.on_line(line)

    def kill(self) -> None:
        """Stop the agent and everything in its process group."""
        if self.popen.returncode is None:  # once reaped, its pid may be someone else's
            kill_group(self.popen.pid)
            watchdog_link.untrack(self.popen.pid)
        if self.popen.poll() is None:
            self.popen.kill()


def read_lines(stream: Any, limit: int) -> Iterator[tuple[str, int]]:
    """The lines of a binary stream, decoded (UTF-8, bad bytes replaced), each with the bytes
    cut from it: a line longer than `limit` bytes yields its first `limit` and the count of
    the rest, which is read in chunks and dropped. Never holds more than `limit` bytes."""
    while True:
        raw: bytes = stream.readline(limit + 1)
        if not raw:
            return
        cut = 0
        if len(raw) > limit and not raw.endswith(b"\n"):
            cut = len(raw) - limit
            raw = raw[:limit]
            while True:
                rest: bytes = stream.readline(_CHUNK)
                if not rest:
                    break
                if rest.endswith(b"\n"):
                    cut += len(rest) - 1
                    break
                cut += len(rest)
        yield raw.rstrip(b"\n").decode("utf-8", "replace"), cut


def _keep_tail(stream: Any, tail: bytearray) -> None:
    """Read the agent's stderr to its end, keeping only its last STDERR_KEEP bytes."""
    while chunk := stream.read1(_CHUNK):
        tail.extend(chunk)
        if len(tail) > STDERR_KEEP:
            del tail[: len(tail) - STDERR_KEEP]


def kill_group(pgid: int) -> None:
    """SIGKILL the process group `pgid` (an agent's pid); a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


_PR_SET_PDEATHSIG: Final = 1


def _parent_death_signal() -> Callable[[], None] | None:
    """A pre-exec hook asking the kernel to SIGKILL the child when its parent dies (Linux).

    The kernel means the *thread* that started the child; a turn's thread waits for its agent,
    so that thread ends only with the turn or with the worker."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork and prctl: then no signal will ever come.
        if os.getppid() != parent:
            os._exit(1)

    return hook


_SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None


def _launcher(command: tuple[str, ...], env: Mapping[str, str], cwd: Path | None) -> list[str]:
    """The command line that starts `command` with the parent-death signal: through setpriv,
    after looking the command up as exec would (raising exec's OSError when it cannot run);
    without setpriv, `command` itself (the caller adds the pre-exec hook)."""
    if _SETPRIV is None:
        return list(command)
    exe = command[0]
    if os.path.dirname(exe):
        candidates = [exe if cwd is None else os.path.join(cwd, exe)]
    else:
        candidates = [os.path.join(d, exe) for d in os.get_exec_path(dict(env))]
    found = [c for c in candidates if os.path.isfile(c)]
    for path in found:
        if os.access(path, os.X_OK):
            if not _exec_format(path):
                # exec would refuse it (a script without `#!`): say so, as exec would, rather
                # than let setpriv's exit status stand for it
                raise OSError(errno.ENOEXEC, os.strerror(errno.ENOEXEC), exe)
            return [_SETPRIV, "--pdeathsig", "KILL", "--", path, *command[1:]]
    code = errno.EACCES if found else errno.ENOENT
    raise OSError(code, os.strerror(code), exe)


def _exec_format(path: str) -> bool:
    """Whether exec can run the file: an ELF binary or a `#!` script (what Linux runs without
    a binfmt_misc handler, which a file it does not know falls to when one is registered)."""
    try:
        with open(path, "rb") as file:
            head = file.read(4)
    except OSError:
        return True  # exec will say what is wrong
    return head.startswith((b"\x7fELF", b"#!")) or _BINFMT_MISC


def _binfmt_handlers() -> bool:
    try:
        names = os.listdir("/proc/sys/fs/binfmt_misc")
    except OSError:
        return False
    return any(name not in ("register", "status") for name in names)


_BINFMT_MISC = _binfmt_handlers()


def start(
    command: tuple[str, ...],
    *,
    prompt: str,
    env: Mapping[str, str],
    execution_id: str,
    on_message: Callable[[Message], None],
    on_line: Callable[[str], None] | None = None,
    cwd: Path | None = None,
) -> AgentProcess:
    """Start the agent (in `cwd`: its task's worktree, default the worker's own directory);
    raises LaunchError when the command cannot run at all."""
    if not command:
        raise LaunchError("the agent profile has no command")
    watchdog_link.announce()
    try:
        popen = subprocess.Popen(
            _launcher(command, env, cwd),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
            # the hook is async-signal-safe: one syscall
            preexec_fn=_parent_death_signal() if _SETPRIV is None else None,  # noqa: PLW1509
            # Exactly `env`: the caller built it from a documented base (agent_env), so the
            # worker's secrets stay in the worker; and the turn's mark, which what the agent
            # starts inherits (`sweep_leftovers`).
            env={**env, EXECUTION_ENV: execution_id},
            cwd=cwd,
        )
    except OSError as exc:
        watchdog_link.track(None)
        raise LaunchError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
    watchdog_link.track(popen.pid)
    # What the agent moved out of its group would hold its output pipes open past its exit
    # (the turn would not end until it did): swept the moment the agent exits.
    pid, read = popen.pid, threading.Event()
    spare.run(lambda: _sweep_on_exit(execution_id, pid, read))
    assert popen.stdin is not None
    try:
        popen.stdin.write(prompt.encode("utf-8", "replace"))
        popen.stdin.close()
    except BrokenPipeError:
        pass  # the agent did not read its prompt; its exit status tells the rest
    return AgentProcess(popen, execution_id, on_message, on_line, read=read)


def _sweep_quietly(execution_id: str, agent: int) -> None:
    sweep_leftovers(execution_id, agent)


def _sweep_on_exit(execution_id: str, agent: int, read: threading.Event) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitid(os.P_PID, agent, os.WEXITED | os.WNOWAIT)
    if read.wait(HELD_OPEN_S):
        # nothing holds its output open: the sweep after the turn finds what it left (a sweep
        # reads every process's environment: one a run saved, issue 45)
        return
    # the agent's group is the turn's end's to kill (what it still prints is the turn's)
    sweep_leftovers(execution_id, agent, spare_group=True)


def sweep_leftovers(execution_id: str, agent: int, *, spare_group: bool = False) -> list[int]:
    """SIGKILL every process still carrying the turn's `LANEWAY_EXECUTION_ID=execution_id` in
    its environment (what the agent started and moved out of its process group: `setsid`, a
    double fork), found in /proc, but the agent itself (not reaped yet); the pids killed.

    Passes repeat while they find something, for a process may fork between a look and its
    kill (the child inherits the mark). A process that rewrote its environment is not found;
    one of another user, or non-dumpable, cannot be read and is not either. `spare_group`:
    leave the agent's own process group alone."""
    if not sys.platform.startswith("linux"):
        return []
    mark = f"\0{EXECUTION_ENV}={execution_id}\0".encode()
    own = os.getpid()
    killed: list[int] = []
    for _ in range(SWEEP_PASSES):
        found = []
        try:
            names = os.listdir("/proc")
        except OSError:
            return killed
        for name in names:
            if not name.isdigit() or int(name) in (own, agent):
                continue
            environ = _environ(name)
            if environ is None:
                continue
            if mark in environ and not (spare_group and _group(int(name)) == agent):
                found.append(int(name))
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += found
        if not found:
            break
    return killed


def _environ(pid: str) -> bytes | None:
    """Process `pid`'s environment, each entry between NUL bytes (`\\0A=1\\0B=2\\0`), or None
    when it cannot be read. Two sweeps a turn read every process's: through a file object,
    split into a list of entries, a sweep of 130 processes took 1.4 ms of CPU, a tenth of an
    exec run's (issue 45); plain reads and one substring search take two thirds of that."""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = [b"\0"]
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    chunks.append(b"\0")
    return b"".join(chunks)


def _group(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
        return int(data[data.rindex(b")") + 2 :].split()[2])
    except (OSError, ValueError, IndexError):
        return None
