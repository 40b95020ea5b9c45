"""Issue 43 item 4: the command line `core.agents.sandbox` makes (no process started): what is
hidden, exposed and masked, and in which order bwrap lays the mounts."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from core.agents import sandbox
from core.model import AgentProfile


def _pairs(args: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The mount options of a bwrap command line, each with its operands, in order."""
    found: list[tuple[str, ...]] = []
    i = 0
    while i < len(args) and args[i] != "--":
        arg = args[i]
        if arg in ("--tmpfs", "--dev", "--proc", "--chdir"):
            found.append((arg, args[i + 1]))
            i += 2
        elif arg in ("--bind", "--ro-bind"):
            found.append((arg, args[i + 1], args[i + 2]))
            i += 3
        else:
            i += 1
    return found


def test_issue_43_item_4_the_room_hides_then_exposes_deeper_and_masks_the_board_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    worktrees = home / "wt"
    cwd = worktrees / "task-1"
    (cwd / "bin").mkdir(parents=True)
    agent = cwd / "bin" / "agent"
    agent.write_text("#!/bin/sh\n")
    agent.chmod(0o755)
    board = cwd / "board.db"  # a board inside the turn's own directory: still masked
    board.write_text("")
    monkeypatch.setenv("LANEWAY_WORKTREES", str(worktrees))
    if sandbox.shutil.which("bwrap") is None:
        monkeypatch.setattr(sandbox.shutil, "which", lambda n, path=None: f"/usr/bin/{n}")
    profile = AgentProfile("p", "w", "p", sandbox="bwrap", network="off")
    room = sandbox.room(profile, cwd, "task-1", make_url(f"sqlite:///{board}"), {"HOME": str(home)})
    assert room is not None
    args = room.wrap(("bin/agent", "--flag"), {"PATH": "/usr/bin"})
    assert "--unshare-net" in args
    assert args[args.index("--cap-drop") : args.index("--cap-drop") + 2] == ("--cap-drop", "ALL")
    assert "--new-session" not in args  # the worker's group kill must reach inside
    assert args[-3:] == ("--", str(agent), "--flag")
    mounts = _pairs(args)
    at = {m: n for n, m in enumerate(mounts)}
    hide_home = at[("--tmpfs", str(home))]
    hide_worktrees = at[("--tmpfs", str(worktrees))]
    own_home = at[("--bind", str(worktrees / ".homes" / "task-1"), str(home))]
    own_dir = at[("--bind", str(cwd), str(cwd))]
    mask = at[("--ro-bind", "/dev/null", str(board))]
    assert hide_home < own_home < hide_worktrees < own_dir < mask
    # the program lies in the room: it is not made read-only there
    assert ("--ro-bind", str(cwd / "bin"), str(cwd / "bin")) not in mounts
    assert room.env({"HOME": str(home), "X": "1"}) == {
        "HOME": str(home),
        "X": "1",
        "TMPDIR": "/tmp",
    }


def test_issue_43_item_4_no_sandbox_no_room(tmp_path: Path) -> None:
    profile = AgentProfile("p", "w", "p")
    assert sandbox.room(profile, tmp_path, "t", make_url("sqlite:///x.db")) is None
