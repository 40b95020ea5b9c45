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
to direct children only. Its group is registered with the worker's watchdog
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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from core.agents import watchdog_link

TRANSIENT_EXIT: Final = 75
MESSAGE_KEYS: Final = frozenset({"decision", "step_complete", "log", "usage"})
STDERR_TAIL: Final = 2000


class LaunchError(Exception):
    """The command could not be started (missing binary, not executable, ...)."""


@attrs.frozen
class TurnResult:
    exit_code: int
    transcript: tuple[str, ...]
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

    popen: subprocess.Popen[str]
    execution_id: str
    on_message: Callable[[Message], None]
    on_line: Callable[[str], None] | None = None
    """Each transcript line as it arrives (the board keeps it while the turn runs)."""
    transcript: list[str] = attrs.field(factory=list)

    def wait(self) -> TurnResult:
        stdout, stderr = self.popen.stdout, self.popen.stderr
        assert stdout is not None
        assert stderr is not None
        errors: list[str] = []
        drain = threading.Thread(target=lambda: errors.append(stderr.read()))
        drain.start()
        for line in stdout:
            self._handle(line.rstrip("\n"))
        # The agent has exited but is not reaped yet, so its pid (the group id) cannot have been
        # reused: sweep what it left behind in its group, then reap it.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOWAIT)
        kill_group(self.popen.pid)
        watchdog_link.untrack(self.popen.pid)
        code = self.popen.wait()
        drain.join()
        return TurnResult(
            code, tuple(self.transcript), "".join(errors)[-STDERR_TAIL:], self.execution_id
        )

    def _handle(self, line: str) -> None:
        if line.startswith("{"):
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict) and message.keys() & MESSAGE_KEYS:
                self.on_message(message)
                return
        self.transcript.append(line)
        if self.on_line is not None:
            self.on_line(line)

    def kill(self) -> None:
        """Stop the agent and everything in its process group."""
        if self.popen.returncode is None:  # once reaped, its pid may be someone else's
            kill_group(self.popen.pid)
            watchdog_link.untrack(self.popen.pid)
        if self.popen.poll() is None:
            self.popen.kill()


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
            text=True,
            process_group=0,
            # the hook is async-signal-safe: one syscall
            preexec_fn=_parent_death_signal() if _SETPRIV is None else None,  # noqa: PLW1509
            # Exactly `env`: the caller built it from a documented base (agent_env), so the
            # worker's secrets stay in the worker.
            env=dict(env),
            cwd=cwd,
        )
    except OSError as exc:
        watchdog_link.track(None)
        raise LaunchError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
    watchdog_link.track(popen.pid)
    assert popen.stdin is not None
    try:
        popen.stdin.write(prompt)
        popen.stdin.close()
    except BrokenPipeError:
        pass  # the agent did not read its prompt; its exit status tells the rest
    return AgentProcess(popen, execution_id, on_message, on_line)
