"""A worktree's `.git` file and its own git directory's `commondir` are its agent's to write:
laneway never takes from them where the repository is. What they named was mounted into the
agent's next room (another task's worktree, the worker's home: out of the sandbox), and
laneway's own git (a diff, a commit before a merge or a push, a retirement) ran in whatever
repository they named, that repository's config included (a `core.fsmonitor` command, run
as the worker, outside any sandbox). Issue 43 item 4's room and issue 40's worktrees; real
git repositories."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from core import gitmerge, gitwork
from core.agents import sandbox
from core.errors import LanewayError
from core.model import AgentProfile
from tests.agents.test_worktrees import git, make_repo

pytestmark = pytest.mark.slow  # git processes: the subprocess tier


def _worktree(tmp_path: Path, name: str = "task-1") -> tuple[Path, Path, Path]:
    """A repository, the worktrees' root, and a task's worktree in it (as laneway makes one:
    named by the task, on its own branch)."""
    repo = make_repo(tmp_path / "repo")
    root = tmp_path / "wt"
    root.mkdir()
    path = root / name
    git(repo, "worktree", "add", "-q", "-b", f"laneway/{name}", str(path))
    return repo, root, path


def test_the_room_takes_the_git_files_from_the_repository_not_from_the_worktree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent points its `.git` at the worktrees' root and its `commondir` at the worker's
    home: its next room still exposes exactly the repository's git directory (read-only), its
    objects, refs and logs, and the worktree's own git directory; nothing either file named."""
    repo, root, path = _worktree(tmp_path)
    other = root / "task-2"
    other.mkdir()
    (other / "secret.txt").write_text("another task's\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("LANEWAY_WORKTREES", str(root))
    if sandbox.shutil.which("bwrap") is None:
        monkeypatch.setattr(sandbox.shutil, "which", lambda n, path=None: f"/usr/bin/{n}")
    profile = AgentProfile("p", "w", "p", sandbox="bwrap")
    own = repo / ".git" / "worktrees" / "task-1"
    common = repo / ".git"
    expected = {
        (common.resolve(), "ro"),
        *((common.resolve() / part, "rw") for part in ("objects", "refs", "logs")),
        (own.resolve(), "rw"),
    }

    def git_parts() -> set[tuple[Path, str]]:
        room = sandbox.room(
            profile, path, "task-1", make_url("sqlite:///x.db"), {"HOME": str(home)}, repo=repo
        )
        assert room is not None
        return {(p, kind) for p, kind in room.exposed if p.is_relative_to(tmp_path)}

    assert git_parts() == expected
    # its own config (read with extensions.worktreeConfig, by laneway's git too) is covered
    room = sandbox.room(profile, path, "task-1", make_url("sqlite:///x.db"), repo=repo)
    assert room is not None
    assert own.resolve() / "config.worktree" in room.masked
    assert (own / "config.worktree").read_text() == ""
    (path / ".git").write_text(f"gitdir: {root}\n")
    (own / "commondir").write_text(f"{home}\n")
    assert git_parts() == expected


def _planted(path: Path, marker: Path) -> None:
    """What an agent can do in its room: a repository of its own (in its home, beside the
    worktrees) whose config runs a command (`core.fsmonitor`) whenever git refreshes its
    index there, and the worktree's `.git` pointing at it."""
    evil = path.parent / ".homes" / path.name / "evil"
    git(path, "init", "-q", str(evil))
    script = evil / "monitor.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    git(evil, "config", "core.fsmonitor", str(script))
    (path / ".git").write_text(f"gitdir: {evil / '.git'}\n")


def test_laneways_git_in_a_worktree_never_runs_a_repository_the_agent_named(
    tmp_path: Path,
) -> None:
    """A diff, a commit of what is uncommitted and a retirement run git in the worktree with
    its git directories pinned to the repository's: the agent's repository, and the command
    its config names, are never run; the work is the repository's branch's."""
    repo, _root, path = _worktree(tmp_path)
    base = git(repo, "rev-parse", "HEAD")
    (path / "work.txt").write_text("the agent's\n")
    marker = tmp_path / "escaped"
    _planted(path, marker)
    # as it was before: git in the worktree itself runs the agent's repository's command
    subprocess.run(["git", "status"], cwd=path, capture_output=True, check=False)
    assert marker.exists()
    marker.unlink()

    change = gitwork.diff(repo, path, base)
    assert "work.txt" in {f.path for f in change.files}
    made = gitmerge.commit_all(repo, path, "laneway: the agent's work")
    assert made is not None
    assert git(repo, "show", f"{made}:work.txt") == "the agent's"
    assert git(repo, "rev-parse", "refs/heads/laneway/task-1") == made
    (path / "more.txt").write_text("more\n")
    retired = gitwork.retire(repo, path, "laneway/task-1", "laneway: retired")
    assert retired is not None
    assert git(repo, "show", f"{retired}:more.txt") == "more"
    assert not marker.exists()


def test_a_worktree_whose_git_files_no_longer_name_it_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """The worktree's own git directory no longer points back at it (its agent changed it):
    laneway's git refuses the worktree, naming it, instead of guessing."""
    repo, _root, path = _worktree(tmp_path)
    (repo / ".git" / "worktrees" / "task-1" / "gitdir").write_text("/elsewhere/.git\n")
    with pytest.raises(LanewayError, match=r"worktree .*task-1: no worktree of .* names it"):
        gitwork.diff(repo, path, git(repo, "rev-parse", "HEAD"))
