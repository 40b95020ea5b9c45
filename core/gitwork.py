"""Git worktrees for tasks, through Debian's `git` as a subprocess (no library: git's own
locks and checks are the point).

Making a worktree is serialised per task by an advisory lock (`flock`) on a file beside it, so
two workers on one machine racing to make the same task's worktree end with one; the kernel
drops the lock when its holder dies, so a worker killed mid-creation never wedges the next.
What a dead worker left (git's own `locked: initializing` mark on a half-made worktree, or an
empty directory) is removed and the worktree made again: nothing of an agent's can be in a
worktree no turn has run in yet. A finished worktree is never removed here, whatever branch
its agent has switched it to; a directory holding files that is no worktree is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Final

import attrs

from core.errors import LanewayError

PATCH_LIMIT: Final = 1_000_000
"""Characters of patch `task diff` returns; a longer one is cut, and says so."""
STAGE_TRIES: Final = 50
"""How many times a diff stages a worktree that files vanish from while git scans it (an
agent renaming files into place as fast as it can failed 218 of 561 scans here; each try is one
`git add`, and only that failure is tried again)."""
IDENTITY: Final = ("-c", "user.name=laneway", "-c", "user.email=laneway@localhost")
"""Who laneway's own commits are by (the repository's identity may be unset)."""
STATUS: Final = {"A": "added", "M": "modified", "D": "deleted", "T": "modified"}


class GitError(LanewayError):
    """A repository, branch or worktree laneway cannot use, or a git command that failed; the
    message names the repository and what was asked."""

    code: ClassVar[str] = "git"
    http_status: ClassVar[int] = 400


GIT_VARS: Final = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR")
GIT_PREFIXES: Final = ("GIT_", "SSH_", "XDG_", "LC_")


def git_env(worker: Mapping[str, str]) -> dict[str, str]:
    """What a git process laneway starts sees of its environment: what git reads, never the
    worker's secrets (the database URL, `PGPASSWORD`, cloud keys), which a same-user agent
    could read in a running git's /proc/<pid>/environ."""
    return {k: v for k, v in worker.items() if k in GIT_VARS or k.startswith(GIT_PREFIXES)}


def git(
    cwd: Path, *args: str, env: Mapping[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            env={**git_env(os.environ), "GIT_TERMINAL_PROMPT": "0", **(env or {})},
            check=False,
        )
    except FileNotFoundError:
        raise GitError(f"cannot run git in {cwd}: no such directory or no git") from None
    except NotADirectoryError:
        raise GitError(f"cannot run git in {cwd}: not a directory") from None
    if check and done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise GitError(f"git {_command_of(args)} in {cwd}: {last}")
    return done


def _command_of(args: tuple[str, ...]) -> str:
    """git's command among `args` (past `-c NAME=VALUE` settings)."""
    rest = list(args)
    while len(rest) > 1 and rest[0] == "-c":
        rest = rest[2:]
    return rest[0] if rest else "?"


UNTRUSTED: Final = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
"""Set on every git laneway runs in a task's worktree: its files are its agent's, and neither
git's file-system monitor nor a hook may run a command there for laneway (the repository's
config, which names them, is read-only to a sandboxed agent; these settings come first
whatever config says)."""


@attrs.frozen
class WorktreeGit:
    """Git in a task's worktree, its git files found from the repository laneway recorded,
    never from the worktree's own `.git` file or its `commondir`: the agent writes those, and
    pointing them at a repository of its own would make laneway's git run that repository's
    config (a `core.fsmonitor` command, say) outside the agent's sandbox."""

    path: Path
    admin: Path
    """The worktree's own git directory (`<common>/worktrees/<name>`)."""
    common: Path
    """The repository's git directory."""

    @property
    def env(self) -> dict[str, str]:
        return {
            "GIT_DIR": str(self.admin),
            "GIT_COMMON_DIR": str(self.common),
            "GIT_WORK_TREE": str(self.path),
        }

    def run(
        self, *args: str, env: Mapping[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return git(self.path, *UNTRUSTED, *args, env={**self.env, **(env or {})}, check=check)

    def commit_everything(self, message: str) -> str | None:
        """Commit whatever the worktree holds uncommitted, untracked files included (a commit
        by laneway); the commit made, or None when there was nothing."""
        self.run("add", "--all")
        if self.run("diff", "--cached", "--quiet", "--no-ext-diff", check=False).returncode == 0:
            return None
        self.run(*IDENTITY, "commit", "--no-verify", "--quiet", "-m", message)
        return self.run("rev-parse", "HEAD").stdout.strip()


def worktree_git(repo: Path, path: Path) -> WorktreeGit:
    """Git for the worktree at `path` of `repo`: its own git directory is the one of `repo`'s
    worktrees that names `path` as its checkout (git's own back-pointer, `gitdir`), preferring
    the one named as laneway names it (the worktree's directory name) when the worktree's
    agent made another name it too. A one-line GitError when none does."""
    common = _common_dir(repo)
    wanted = {os.path.join(path, ".git"), os.path.join(path.resolve(), ".git")}
    claiming: list[Path] = []
    with contextlib.suppress(OSError):
        for admin in (common / "worktrees").iterdir():
            with contextlib.suppress(OSError):
                pointed = (admin / "gitdir").read_text(encoding="utf-8").strip()
                if os.path.normpath(pointed) in wanted:
                    claiming.append(admin)
    named = [a for a in claiming if a.name == path.name]
    found = named or claiming
    if len(found) != 1:
        raise GitError(
            f"worktree {path}: {'no' if not found else 'more than one'} worktree of {repo} "
            "names it as its checkout"
        )
    return WorktreeGit(path, found[0], common)


@functools.lru_cache(maxsize=64)
def _common_dir(repo: Path) -> Path:
    """The git directory of the repository at `repo`: the same for its life, so asked once a
    process (a page reading a task's diff asks for it with every read)."""
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip())


def repository(path: str) -> Path:
    """The top of the git repository at `path` (absolute), or a one-line error naming it."""
    where = Path(path).expanduser()
    if not where.is_dir():
        raise GitError(f"repository {path}: no such directory")
    done = git(where, "rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0:
        raise GitError(f"repository {path}: not a git repository")
    return Path(done.stdout.strip()).resolve()


def default_branch(repo: Path) -> str:
    """The branch checked out in the repository's main worktree."""
    done = git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    if done.returncode != 0:
        raise GitError(f"repository {repo}: HEAD is detached; name a base branch")
    return done.stdout.strip()


def branch_commit(repo: Path, branch: str) -> str:
    """The commit `branch` names in `repo`, or a one-line error naming both."""
    done = git(
        repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", check=False
    )
    if done.returncode != 0:
        raise GitError(f"repository {repo} has no branch {branch!r}")
    return done.stdout.strip()


@contextlib.contextmanager
def creation_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _registered(repo: Path) -> dict[Path, dict[str, str]]:
    """The repository's worktrees (`git worktree list --porcelain`), by path."""
    found: dict[Path, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in [*git(repo, "worktree", "list", "--porcelain").stdout.splitlines(), ""]:
        if not line:
            if "worktree" in current:
                found[Path(current["worktree"]).resolve()] = current
            current = {}
            continue
        key, _, value = line.partition(" ")
        current[key] = value
    return found


def ensure_worktree(repo: Path, path: Path, branch: str, base_commit: str) -> bool:
    """Make the worktree at `path` on `branch` (a new branch from `base_commit`, or the branch
    as it stands when it exists already); True when this call made it."""
    if not repo.is_dir():
        raise GitError(f"repository {repo}: no such directory")
    try:
        return _ensure(repo, path, branch, base_commit)
    except OSError as exc:
        raise GitError(f"worktree {path}: {exc.strerror or exc}") from None


def _ensure(repo: Path, path: Path, branch: str, base_commit: str) -> bool:
    with creation_lock(path):
        entry = _registered(repo).get(path.resolve())
        half_made = entry is not None and entry.get("locked") == "initializing"
        if entry is not None and not half_made and (path / ".git").exists():
            # sound, on whatever branch the agent has it now: never touched again
            return False
        if half_made:
            removed = git(repo, "worktree", "remove", "--force", "--force", str(path), check=False)
            if removed.returncode != 0:
                # killed before git wrote the path's `.git`: remove refuses such a path, and
                # prune keeps a locked registration (add would then refuse the path): unlocked,
                # the prune below drops it once the path is gone
                git(repo, "worktree", "unlock", str(path), check=False)
        elif path.exists() and any(p.name != ".git" for p in path.iterdir()):
            raise GitError(
                f"worktree {path}: exists and is not a worktree of {repo}; left in place"
            )
        if path.exists():
            shutil.rmtree(path)
        git(repo, "worktree", "prune")
        has_branch = git(
            repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False
        )
        if has_branch.returncode == 0:
            git(repo, "worktree", "add", str(path), branch)
        else:
            git(repo, "worktree", "add", "-b", branch, str(path), base_commit)
        return True


@attrs.frozen
class FileChange:
    path: str
    status: str
    additions: int
    deletions: int


@attrs.frozen
class Diff:
    files: tuple[FileChange, ...]
    patch: str
    truncated: bool


@contextlib.contextmanager
def _everything_staged(work: WorktreeGit) -> Iterator[dict[str, str]]:
    """An environment whose index is a copy of the worktree's with every change staged,
    untracked files included (`.gitignore` respected); the worktree's own index is untouched."""
    path = work.path
    index = work.admin / "index"
    with tempfile.TemporaryDirectory(prefix="laneway-diff-") as tmp:
        copy = Path(tmp) / "index"
        if index.exists():
            shutil.copyfile(index, copy)
        env = {**work.env, "GIT_INDEX_FILE": str(copy)}
        for attempt in range(STAGE_TRIES):
            try:
                work.run("add", "--all", env=env)
                break
            except GitError as exc:
                # The agent may be writing here: a file it renames away (an atomic write's
                # temporary) between git's scan and its stat fails the add ("unable to stat
                # ...: No such file or directory"); the next scan no longer finds it.
                vanished = "No such file or directory" in str(exc)
                if not vanished or attempt == STAGE_TRIES - 1 or not path.is_dir():
                    raise
                time.sleep(0.002)
        yield env


def diff(repo: Path, path: Path, base_commit: str) -> Diff:
    """The worktree at `path` of `repo` against `base_commit`: commits on its branch, staged,
    unstaged and untracked changes alike."""
    if not path.is_dir():
        raise GitError(f"worktree {path}: no such directory")
    work = worktree_git(repo, path)
    with _everything_staged(work) as env:
        return _diff(path, ("--cached", base_commit), env, untrusted=True)


def branch_diff(repo: Path, base_commit: str, branch: str) -> Diff:
    """`branch` against `base_commit` (a task whose worktree was removed: its branch has it all)."""
    return _diff(repo, (base_commit, f"refs/heads/{branch}"), {})


def _diff(
    cwd: Path, what: tuple[str, ...], env: Mapping[str, str], *, untrusted: bool = False
) -> Diff:
    # a worktree's `.gitattributes` is its agent's: no diff driver or text conversion it names
    # runs (a config entry for one is the repository's, read-only to a sandboxed agent)
    guard = (*UNTRUSTED, "-c", "diff.external=") if untrusted else ()
    args = (*guard, "-c", "core.quotepath=off", "diff", "--no-renames", "--no-ext-diff",
            "--no-textconv", *what)  # fmt: skip
    numstat = git(cwd, *args, "--numstat", "-z", env=env).stdout
    names = git(cwd, *args, "--name-status", "-z", env=env).stdout
    patch = git(cwd, *args, env=env).stdout
    counts: dict[str, tuple[int, int]] = {}
    for record in numstat.split("\0"):
        if not record:
            continue
        plus, minus, name = record.split("\t", 2)
        # a binary file counts no lines ("-")
        counts[name] = (_count(plus), _count(minus))
    fields = [f for f in names.split("\0") if f]
    files = []
    for status, name in zip(fields[0::2], fields[1::2], strict=True):
        added, deleted = counts.get(name, (0, 0))
        files.append(FileChange(name, STATUS.get(status[:1], "modified"), added, deleted))
    truncated = len(patch) > PATCH_LIMIT
    return Diff(tuple(files), patch[:PATCH_LIMIT], truncated)


def _count(raw: str) -> int:
    return int(raw) if raw.isdigit() else 0


def retire(repo: Path, path: Path, branch: str, message: str) -> str | None:
    """Commit whatever is uncommitted in the worktree to its branch (a commit by laneway,
    saying so), then remove the worktree; the branch stays. The commit made, if any."""
    made = None
    if (path / ".git").exists():
        made = worktree_git(repo, path).commit_everything(message)
        # its `.git` pointed back at its git directory again (its agent may have changed it),
        # or git refuses to remove it
        git(repo, "worktree", "repair", str(path), check=False)
        git(repo, "worktree", "remove", str(path))
    elif path.exists():
        raise GitError(f"worktree {path}: not a git checkout; left in place")
    git(repo, "worktree", "prune")
    git(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")
    return made


def as_json(change: Diff) -> dict[str, Any]:
    return {
        "files": [attrs.asdict(f) for f in change.files],
        "patch": change.patch,
        "truncated": change.truncated,
    }
