"""One agent turn as a subprocess.

The agent gets the prompt on stdin and identifying variables in its environment, and talks
back with JSON lines on stdout: ``{"decision": ..., "comment": ...}``, ``{"step_complete":
true}``, ``{"log": ...}``. Any other stdout line is transcript. Exit 0 ends the turn; exit 75
(EX_TEMPFAIL) is a transient failure worth retrying; anything else is a terminal failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

TRANSIENT_EXIT: Final = 75
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
            if isinstance(message, dict) and message.keys() & {"decision", "step_complete", "log"}:
                self.on_message(message)
                return
        self.transcript.append(line)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()


def start(
    command: tuple[str, ...],
    *,
    prompt: str,
    env: Mapping[str, str],
    execution_id: str,
    on_message: Callable[[Message], None],
) -> AgentProcess:
    """Start the agent; raises LaunchError when the command cannot run at all."""
    if not command:
        raise LaunchError("the agent profile has no command")
    try:
        popen = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
    except OSError as exc:
        raise LaunchError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
    assert popen.stdin is not None
    try:
        popen.stdin.write(prompt)
        popen.stdin.close()
    except BrokenPipeError:
        pass  # the agent did not read its prompt; its exit status tells the rest
    return AgentProcess(popen, execution_id, on_message)
