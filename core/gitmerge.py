"""Landing a task's branch: merge, squash or rebase it into a base branch, and push it, through
git's plumbing (docs/workspaces.md "From card to merged change").

No checkout is touched. A merge or squash is computed by `git merge-tree --write-tree` (the
object database only) and written by `git commit-tree`; a rebase replays the branch's commits
in a scratch worktree of laneway's own (its index only: no file checked out beforehand),
removed afterwards. The base branch then moves only by
`git update-ref <ref> <new> <old>`: a compare-and-swap, so a commit that landed on the base
meanwhile makes the swap fail and the merge is computed again on top of it, never lost.

A merge whose effect is already on the base is recognised, not done again: the base contains
the branch's tip, or a commit carrying the caller's `Laneway-Entry:` trailer, or merging would
change nothing. That is what lets a crashed merge be completed instead of repeated.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar, Final, Literal

import attrs

from core.gitwork import IDENTITY, GitError, git, worktree_git

Strategy = Literal["merge", "squash", "rebase"]
STRATEGIES: Final[tuple[Strategy, ...]] = ("merge", "squash", "rebase")
TRAILER: Final = "Laneway-Entry"
ATTEMPTS: Final = 20
"""Swaps tried before giving up on a base branch that moves faster than a merge is computed."""


class MergeConflict(GitError):
    """The branch does not merge cleanly: nothing was changed; `paths` are every conflicting
    path."""

    code: ClassVar[str] = "merge_conflict"
    http_status: ClassVar[int] = 409

    def __init__(self, message: str, paths: tuple[str, ...]) -> None:
        super().__init__(message)
        self.paths = paths

    def details(self) -> dict[str, object]:
        return {"paths": list(self.paths)}


class PushRefused(GitError):
    """The remote refused the push, or its branch holds what laneway did not push there."""

    code: ClassVar[str] = "push_refused"
    http_status: ClassVar[int] = 409


@attrs.frozen
class Landed:
    commit: str
    """The base branch's commit that holds the change (the one this call made, or found)."""
    before: str
    """The base branch's commit before this call moved it (== commit when it did not)."""
    already: bool
    """The base already held the change: nothing was written."""


def ref_commit(repo: Path, ref: str) -> str | None:
    done = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def is_ancestor(repo: Path, ancestor: str, of: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", ancestor, of, check=False).returncode == 0


def _tree(repo: Path, commit: str) -> str:
    return git(repo, "rev-parse", f"{commit}^{{tree}}").stdout.strip()


def carrying(repo: Path, base: str, source: str, key: str) -> str | None:
    """A commit on `base` (and not on `source`) whose message carries `Laneway-Entry: key`."""
    found = git(
        repo,
        "log",
        "-1",
        "--format=%H",
        "--fixed-strings",
        f"--grep={TRAILER}: {key}",
        base,
        f"^{source}",
    ).stdout.strip()
    return found or None


def _merge_tree(repo: Path, ours: str, theirs: str) -> tuple[str, tuple[str, ...]]:
    """The merged tree of two commits, and the conflicting paths (empty when clean)."""
    done = git(
        repo,
        "merge-tree",
        "--write-tree",
        "-z",
        "--name-only",
        "--no-messages",
        ours,
        theirs,
        check=False,
    )
    if done.returncode not in (0, 1):
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise GitError(f"git merge-tree in {repo}: {last}")
    fields = [f for f in done.stdout.split("\0") if f]
    tree, paths = fields[0], tuple(dict.fromkeys(fields[1:]))
    return tree, paths if done.returncode == 1 else ()


def _commit_tree(repo: Path, tree: str, parents: tuple[str, ...], message: str) -> str:
    args = [a for p in parents for a in ("-p", p)]
    return git(repo, *IDENTITY, "commit-tree", tree, *args, "-m", message).stdout.strip()


def _message(subject: str, key: str | None) -> str:
    return f"{subject}\n\n{TRAILER}: {key}" if key else subject


def _conflict(into: str, branch: str, paths: tuple[str, ...]) -> MergeConflict:
    return MergeConflict(
        f"{branch} does not merge into {into}: conflicts in {', '.join(paths)}; nothing changed",
        paths,
    )


def _replay_conflict(
    repo: Path, into: str, branch: str, fork: str, source: str, paths: tuple[str, ...]
) -> MergeConflict:
    """The branch merges cleanly as a whole (checked before replaying), but one of its commits
    does not replay: most often it brought `into` in by a merge, whose resolution a rebase
    does not replay (no more than `git rebase` does). Said as such, or whoever resolves it
    (an agent) would merge `into` in again, find nothing to merge, and conflict for good."""
    merged = git(repo, "rev-list", "--merges", "--max-count=1", f"{fork}..{source}").stdout
    why = (
        f"it merged {into} in, and a rebase replays only its own commits: rebase it onto "
        f"{into} instead"
        if merged.strip()
        else "its commits, replayed one by one, conflict"
    )
    return MergeConflict(
        f"{branch} does not rebase onto {into}: conflicts in {', '.join(paths)} ({why}); "
        "nothing changed",
        paths,
    )


def land(
    repo: Path,
    *,
    branch: str,
    into: str,
    strategy: Strategy,
    subject: str,
    key: str | None = None,
    before_swap: Callable[[], None] | None = None,
    after_commit: Callable[[], None] | None = None,
) -> Landed:
    """Land `branch` on `into` by `strategy`. `key` (an entry id) is written as the
    `Laneway-Entry:` trailer of the commit that lands it and recognised on the base.
    `before_swap` runs just before each ref update (a fenced caller raises there: it never
    moves a ref); `after_commit` once the commit to swap in exists (a fault point)."""
    ref = f"refs/heads/{into}"
    source = ref_commit(repo, f"refs/heads/{branch}")
    if source is None:
        raise GitError(f"repository {repo} has no branch {branch!r}")
    for _ in range(ATTEMPTS):
        old = ref_commit(repo, ref)
        if old is None:
            raise GitError(f"repository {repo} has no branch {into!r}")
        found = _already(repo, old, source, key)
        if found is not None:
            return Landed(found, old, True)
        new = _compute(repo, old, source, branch, into, strategy, _message(subject, key), key)
        if new is None:
            return Landed(old, old, True)
        if after_commit is not None:
            after_commit()
        if before_swap is not None:
            before_swap()
        swapped = git(repo, "update-ref", "-m", f"laneway: {subject}", ref, new, old, check=False)
        if swapped.returncode == 0:
            return Landed(new, old, False)
        # the base moved between the read and the swap: computed again on top of it
    raise GitError(f"branch {into} in {repo} kept moving; {branch} was not merged, try again")


def _already(repo: Path, old: str, source: str, key: str | None) -> str | None:
    if is_ancestor(repo, source, old):
        return old
    if key is not None:
        return carrying(repo, old, source, key)
    return None


def _compute(
    repo: Path,
    old: str,
    source: str,
    branch: str,
    into: str,
    strategy: Strategy,
    message: str,
    key: str | None,
) -> str | None:
    """The commit to swap in for `old`, or None when the base holds the change already."""
    if strategy == "rebase":
        return _rebased(repo, old, source, branch, into, key)
    tree, paths = _merge_tree(repo, old, source)
    if paths:
        raise _conflict(into, branch, paths)
    if tree == _tree(repo, old):
        return None
    parents = (old, source) if strategy == "merge" else (old,)
    return _commit_tree(repo, tree, parents, message)


@contextlib.contextmanager
def _scratch(repo: Path, at: str) -> Iterator[Path]:
    """A detached worktree of laneway's own at `at`, removed afterwards whatever happens. No
    file is checked out (only its index is read): a cherry-pick writes just the files it
    changes, so replaying a branch costs what it changes, not the size of the tree."""
    holder = Path(tempfile.mkdtemp(prefix="laneway-rebase-"))
    path = holder / "tree"
    try:
        git(repo, "worktree", "add", "--detach", "--no-checkout", "--quiet", str(path), at)
        git(path, "read-tree", "HEAD")
        yield path
    finally:
        git(repo, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(holder, ignore_errors=True)
        git(repo, "worktree", "prune", check=False)


def _rebased(
    repo: Path, old: str, source: str, branch: str, into: str, key: str | None
) -> str | None:
    """The branch's commits since it left `into`, replayed onto `old` (their authors and
    messages kept; the last one carries the trailer); None when that changes nothing."""
    fork = git(repo, "merge-base", old, source).stdout.strip()
    commits = git(
        repo, "rev-list", "--reverse", "--no-merges", "--topo-order", f"{fork}..{source}"
    ).stdout.split()
    if not commits:
        return None
    tree, paths = _merge_tree(repo, old, source)
    if paths:
        raise _conflict(into, branch, paths)
    if tree == _tree(repo, old):
        return None
    with _scratch(repo, old) as scratch:
        for commit in commits:
            picked = git(
                scratch,
                *IDENTITY,
                "cherry-pick",
                "--allow-empty",
                "--keep-redundant-commits",
                commit,
                check=False,
            )
            if picked.returncode != 0:
                conflicted = tuple(
                    git(scratch, "diff", "--name-only", "--diff-filter=U").stdout.split()
                )
                git(scratch, "cherry-pick", "--abort", check=False)
                if conflicted:
                    raise _replay_conflict(repo, into, branch, fork, source, conflicted)
                last = (picked.stderr.strip().splitlines() or ["cherry-pick failed"])[-1]
                raise GitError(f"rebasing {branch} onto {into}: {last}")
        if key is not None:
            body = git(scratch, "log", "-1", "--format=%B").stdout.rstrip()
            trailed = f"{body}\n\n{TRAILER}: {key}"
            git(scratch, *IDENTITY, "commit", "--amend", "--quiet", "--no-verify", "-m", trailed)
        return git(scratch, "rev-parse", "HEAD").stdout.strip()


def checked_out_in(repo: Path, branch: str) -> list[Path]:
    """The worktrees of `repo` that have `branch` checked out."""
    found: list[Path] = []
    current: dict[str, str] = {}
    for line in [*git(repo, "worktree", "list", "--porcelain").stdout.splitlines(), ""]:
        if not line:
            if current.get("branch") == f"refs/heads/{branch}" and "worktree" in current:
                found.append(Path(current["worktree"]))
            current = {}
            continue
        key, _, value = line.partition(" ")
        current[key] = value
    return found


def commit_all(repo: Path, path: Path, message: str) -> str | None:
    """Commit whatever the worktree at `path` of `repo` holds uncommitted (a commit by
    laneway); the commit made, or None when there was nothing."""
    if not (path / ".git").exists():
        return None
    return worktree_git(repo, path).commit_everything(message)


def remote_commit(repo: Path, remote: str, branch: str) -> str | None:
    """What the remote's `branch` points at now (None: it has no such branch)."""
    done = git(repo, "ls-remote", "--heads", remote, f"refs/heads/{branch}", check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise PushRefused(f"remote {remote}: cannot be read: {last}")
    for line in done.stdout.splitlines():
        sha, _, name = line.partition("\t")
        if name == f"refs/heads/{branch}":
            return sha
    return None


def push(repo: Path, remote: str, branch: str, commit: str, last_pushed: str | None) -> bool:
    """Push `commit` to the remote's `branch`, only if that branch is still what laneway last
    pushed there (`last_pushed`; None: it must not exist yet). False when the remote had the
    commit already (nothing sent)."""
    there = remote_commit(repo, remote, branch)
    if there == commit:
        return False
    if there is not None and there != last_pushed:
        raise PushRefused(
            f"remote {remote}'s branch {branch} is at {there[:12]}, which laneway did not push "
            "there: someone else pushed to it; left as it is"
        )
    done = git(
        repo,
        "push",
        "--quiet",
        "--porcelain",
        f"--force-with-lease=refs/heads/{branch}:{last_pushed or ''}",
        remote,
        f"{commit}:refs/heads/{branch}",
        check=False,
    )
    if done.returncode != 0:
        said = [
            line
            for line in (done.stdout + "\n" + done.stderr).splitlines()
            if line.strip() and not line.startswith(("To ", "Done"))
        ]
        why = said[-1].strip() if said else f"exit {done.returncode}"
        if "stale info" in why or "fetch first" in why:
            why = "someone else pushed to it; left as it is"
        raise PushRefused(f"remote {remote} refused branch {branch}: {why}")
    return True
