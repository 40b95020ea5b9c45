"""A task's branch travelling between machines through a git remote (docs/operations.md "Many
machines"): the git side of core.services.travel.

On the machine a worktree is re-created on, the branch is fetched from the remote into a local
repository: the person's own repository on the machine that first made the worktree, else a
bare repository of laneway's own under `LANEWAY_WORKTREES/.repos/` (one per remote URL), and
the worktree is added from it. What a worktree left at the same path held uncommitted (a turn
killed before its work was pushed) is committed and kept under `refs/laneway/left/...` in its
repository before that worktree is removed: nothing is thrown away.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path

from core import gitmerge, ids
from core.gitwork import GitError, creation_lock, ensure_worktree, git, worktree_git

REPOS_DIR = ".repos"


def remote_url(repo: Path, remote: str) -> str:
    """The URL a remote name stands for in `repo` (what another machine can reach), or
    `remote` itself when it is a URL or path already."""
    if repo.is_dir():
        done = git(repo, "remote", "get-url", remote, check=False)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return remote


def mirror(root: Path, url: str) -> Path:
    """laneway's own bare repository for `url` under `root` (made empty on first use)."""
    where = root / REPOS_DIR / hashlib.sha1(url.encode()).hexdigest()[:16]
    with creation_lock(where):
        if not (where / "HEAD").exists():
            if where.exists():
                shutil.rmtree(where)  # a half-made one: nothing of anyone's is in it yet
            where.parent.mkdir(parents=True, exist_ok=True)
            git(where.parent, "init", "--quiet", "--bare", where.name)
    return where


def set_aside(repos: Sequence[Path], path: Path, keep_as: str) -> str | None:
    """Remove the worktree at `path` (one left by an earlier stay on this machine), its
    uncommitted work first committed and kept as `keep_as` in its repository; that commit.
    Its repository is the one of `repos` (those laneway made the task's worktrees from) it is
    a worktree of: never one its `.git` file names, which its agent wrote."""
    if not path.exists():
        return None
    if not (path / ".git").exists():
        if any(path.iterdir()):
            raise GitError(f"worktree {path}: exists and is not a git checkout; left in place")
        path.rmdir()
        return None
    work = None
    for repo in dict.fromkeys(r for r in repos if r.is_dir()):
        with contextlib.suppress(GitError):
            work = worktree_git(repo, path)
            break
    if work is None:
        raise GitError(
            f"worktree {path}: not a worktree of {', '.join(map(str, repos))}; left in place"
        )
    common = work.common
    kept = work.commit_everything("laneway: work left uncommitted here before the task moved")
    if kept is not None:
        git(common, "update-ref", keep_as, kept)
    git(common, "worktree", "repair", str(path), check=False)  # as `gitwork.retire` does
    git(common, "worktree", "remove", "--force", "--force", str(path))
    git(common, "worktree", "prune")
    return kept


def recreate(
    repo: Path, url: str, path: Path, branch: str, keep_as: str, earlier: Sequence[Path] = ()
) -> tuple[str, str | None]:
    """Make the worktree at `path` on `branch` as the remote at `url` holds it: set aside what
    was at `path` (a worktree of `repo` or of one of the `earlier` repositories the task's
    worktrees were made from), fetch the branch into `repo`, add the worktree. The commit it
    stands on, and the commit that kept a left worktree's uncommitted work (if any)."""
    kept = set_aside((repo, *earlier), path, keep_as)
    commit = fetch(repo, url, branch)
    local = gitmerge.ref_commit(repo, f"refs/heads/{branch}")
    if local is not None and not gitmerge.is_ancestor(repo, local, commit):
        # commits made here that never reached the remote (a turn killed before its push)
        git(repo, "update-ref", f"{keep_as}-branch", local)
        kept = kept or local
    git(repo, "update-ref", f"refs/heads/{branch}", commit)
    ensure_worktree(repo, path, branch, commit)
    return commit, kept


def fetch(repo: Path, url: str, branch: str) -> str:
    """The commit the remote's `branch` holds, its objects fetched into `repo` (no ref of
    `repo` moved: FETCH_HEAD only)."""
    done = git(repo, "fetch", "--quiet", "--no-tags", url, f"refs/heads/{branch}", check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise GitError(f"remote {url}: cannot fetch branch {branch}: {last}")
    return git(repo, "rev-parse", "FETCH_HEAD^{commit}").stdout.strip()


def left_ref(task_id: str) -> str:
    """Where a set-aside worktree's uncommitted work is kept (one ref per setting aside)."""
    return f"refs/laneway/left/{task_id[-8:]}/{ids.new_id()}"
