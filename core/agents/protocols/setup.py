"""A workflow's setup command (`workflow set W --setup CMD`), run in a task's new worktree
before its first turn, whatever the agent's protocol.

It runs as an exec agent does (`exec_process`): in a process group of its own with the
parent-death signal, in the turn's sandbox when its profile has one, with the agent's
environment, killed by every stop of the turn and by the profile's `--turn-timeout` and
`--idle-timeout`. Its stdout and stderr are one stream (`2>&1`), kept as the turn's `output`
items within exec's bounds (a line is cut at `MAX_LINE` bytes, a turn keeps `TURN_ITEMS`
items), so a setup that prints 10 MB costs bounded memory and a bounded transcript. A setup
that fails (a non-zero exit, a deadline) ends the turn R2 with its last lines; the agent does
not start. One that succeeds is not run again for this worktree: a mark in the worktree's own
git directory (`.git/worktrees/<name>/laneway-setup`, never in the checkout) says so, and a
worktree made again (retired and re-made, or re-created on another host) has none, so it
runs there again (`pending`).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from core.agents.bounds import item
from core.agents.item_queue import ItemQueue
from core.agents.protocols import exec_process as process
from core.agents.protocols.exec import _Deadlines, unread_note
from core.agents.values import TurnEnd
from core.errors import LanewayError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from core.agents.record import BoardRecord
    from core.agents.sandbox import Room
    from core.agents.stops import LiveTurn
    from core.model import AgentProfile

MARK: Final = "laneway-setup"
LAST_LINES: Final = 10
LAST_CHARS: Final = 300
"""A last line kept for the failure's message is cut to this many characters."""
SHELL: Final = "/bin/sh"


def git_dir(worktree: Path) -> Path | None:
    """The worktree's own git directory (`.git/worktrees/<name>` of its repository)."""
    marker = worktree / ".git"
    try:
        text = marker.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    found = (worktree / text.removeprefix("gitdir:").strip()).resolve()
    return found if found.is_dir() else None


def pending(worktree: Path, command: str | None) -> bool:
    """Whether `command` (a workflow's setup) still has to run in `worktree`: a setup is
    given, the directory is a worktree, and no setup succeeded in it since it was made."""
    if not command:
        return False
    own = git_dir(worktree)
    return own is not None and not (own / MARK).exists()


def mark_done(worktree: Path, command: str) -> None:
    own = git_dir(worktree)
    if own is not None:
        (own / MARK).write_text(command, encoding="utf-8")


def run(
    turn: LiveTurn,
    command: str,
    *,
    profile: AgentProfile,
    cwd: Path,
    env: Mapping[str, str],
    room: Room | None,
    record: BoardRecord,
    execution_id: str,
) -> TurnEnd | None:
    """Run the setup `command` in `cwd` for `turn`; None when it succeeded (and is marked
    done), else how the turn ends: R2 with its last lines, or cancelled when it was stopped."""
    said = ItemQueue(record.items)
    said.put([item("log", f"setup: {command}")])
    last: collections.deque[str] = collections.deque(maxlen=LAST_LINES)

    def line(text: str) -> None:
        watch.heard()
        if text.strip():
            last.append(text[-LAST_CHARS:])
        said.put([item("output", text)])

    def message(found: Any) -> None:  # a JSON line is only output here: setup decides nothing
        line(json.dumps(found))

    shell: tuple[str, ...] = (SHELL, "-c", "exec 2>&1\n" + command)
    launch_env = dict(env)
    if room is not None:
        try:
            shell = room.wrap(shell, launch_env)
        except LanewayError as exc:
            said.stop()
            return TurnEnd("failed", f"setup: {exc}", route="R2")
        launch_env = room.env(launch_env)
    watch = _Deadlines(turn, profile.turn_timeout, profile.idle_timeout)
    try:
        proc = process.start(
            shell,
            prompt="",
            env=launch_env,
            execution_id=execution_id,
            on_message=message,
            on_line=line,
            cwd=cwd,
        )
    except process.LaunchError as exc:
        said.stop()
        return TurnEnd("failed", f"setup: {exc}", route="R2")
    turn.proc = proc
    if turn.stopped is not None:
        proc.kill()
    watch.start()
    try:
        result = proc.wait()
        if result.unread:
            said.note(unread_note(turn, None, result.unread))
        said.close()
    except BaseException:
        proc.kill()
        said.stop()
        raise
    finally:
        watch.stop()
        turn.proc = None
    timed_out, turn.timed_out = turn.timed_out, None
    if turn.stopped is not None:
        return TurnEnd("cancelled", "the turn was cancelled during its setup")
    if result.ok and timed_out is None:
        mark_done(cwd, command)
        return None
    why = timed_out or f"exited with status {result.exit_code}"
    tail = " | ".join(last)
    return TurnEnd("failed", f"setup {why}" + (f": {tail}" if tail else ""), route="R2")
