"""An agent command exec cannot run is a LaunchError naming the command and exec's reason -
missing, not executable, or a script without `#!` (exec format error) - whether the agent is
started through `setpriv --pdeathsig` (where it is installed) or with the pre-exec hook; never
an agent that "ran" and exited with setpriv's status (issue 30's faster start kept issue 25
item 8's one-line "cannot start")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.agents.protocols import exec_process as process


def _start(command: list[str], lines: list[str] | None = None) -> process.AgentProcess:
    return process.start(
        tuple(command),
        prompt="",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        execution_id="x",
        on_message=lambda _m: None,
        on_line=None if lines is None else lines.append,
    )


def _file(directory: Path, mode: int | None) -> Path:
    """A file `echo hi` with no `#!`, of `mode`; None: no file at all."""
    path = directory / "agent"
    if mode is not None:
        path.write_text("echo hi\n")
        path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("mode", "reason"),
    [(None, "No such file"), (0o644, "Permission denied"), (0o755, "Exec format error")],
    ids=["missing", "not-executable", "no-shebang"],
)
@pytest.mark.slow
def test_a_command_exec_refuses_is_a_launch_error(
    tmp_path: Path, mode: int | None, reason: str
) -> None:
    path = _file(tmp_path, mode)
    with pytest.raises(process.LaunchError) as raised:
        _start([str(path)])
    assert str(path) in str(raised.value)
    assert reason in str(raised.value)


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_script_with_a_shebang_runs(tmp_path: Path) -> None:
    script = tmp_path / "agent"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    lines: list[str] = []
    result = _start([str(script)], lines).wait()
    assert result.exit_code == 0
    assert (result.lines, lines) == (1, ["hello"])
