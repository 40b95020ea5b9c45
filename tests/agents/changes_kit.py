"""What the issue 40 tests share: a person's repository, a workflow whose tasks work in it, a
task's worktree made as a turn makes it, and the checks on git's side."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from core.host import Host
from core.services.worktrees import workspace_for
from tests.agents.conftest import plain_workflow
from tests.agents.test_worktrees import git, make_repo


def person_repo(tmp_path: Path) -> Path:
    """The person's repository on `main` (README.md, notes.txt, src/app.py), with uncommitted
    work of theirs: a modified tracked file and an untracked one (which no merge may touch)."""
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\nworld\n", "notes.txt": "mine\n"})
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('a')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "app")
    (repo / "notes.txt").write_text("mine, edited and not committed\n")
    (repo / "scratch.txt").write_text("untracked\n")
    return repo


def checkout_state(repo: Path) -> dict[str, Any]:
    """What the person's checkout holds: its index and every file's bytes (its status changes
    with the branch it has checked out, which is the point of a merge)."""
    files = {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return {
        "index": git(repo, "ls-files", "--stage"),
        "files": files,
    }


def board_with_repo(host: Host, tmp_path: Path, repo: Path) -> str:
    wf = plain_workflow(host, tmp_path)
    host.workflows.set_repository(wf, str(repo), None)
    return wf


def task_with_work(
    host: Host, wf: str, files: dict[str, str], *, title: str = "card", commit: bool = False
) -> tuple[str, Path]:
    """A task whose worktree (made as its first turn makes it) holds `files` written by its
    agent: committed on its branch when `commit`, else left uncommitted."""
    task = host.tasks.create(workflow=wf, title=title).id
    path = workspace_for(host, task)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    if commit:
        git(path, "add", "-A")
        git(path, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "-m", "work")
    return task, path


def commit_on(repo: Path, branch: str, name: str, text: str, message: str) -> str:
    """A commit on `branch` made with plumbing (no checkout touched), as a push would land it:
    `name` set to `text` on top of the branch."""
    parent = git(repo, "rev-parse", f"refs/heads/{branch}")
    env = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git" / "laneway-test-index")}
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        cwd=repo, input=text, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    for args in (
        ["read-tree", parent],
        ["update-index", "--add", "--cacheinfo", f"100644,{blob},{name}"],
    ):
        subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, check=True)
    tree = subprocess.run(
        ["git", "write-tree"], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    commit = git(
        repo, "-c", "user.name=someone", "-c", "user.email=s@x",
        "commit-tree", tree, "-p", parent, "-m", message,
    )  # fmt: skip
    git(repo, "update-ref", f"refs/heads/{branch}", commit, parent)
    return commit


def merges_on(repo: Path, branch: str = "main") -> int:
    """How many merge commits `branch` has."""
    return len(git(repo, "rev-list", "--merges", branch).split())


def trailers_on(repo: Path, entry_id: str, branch: str = "main") -> int:
    """How many commits on `branch` carry `Laneway-Entry: <entry_id>`."""
    found = git(
        repo, "log", "--format=%H", "--fixed-strings", f"--grep=Laneway-Entry: {entry_id}", branch
    )
    return len(found.split())


def show(repo: Path, spec: str) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(repo), "show", spec], capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else None
