"""Where agents work: a git worktree per task (docs/agents.md "Where agents work").

A workflow (or one task) names a repository and a base branch. The first turn of such a task
makes a worktree on a branch of its own, `laneway/<last 8 of the task id>`, from the base
branch's commit as it is then, under `LANEWAY_WORKTREES` (default
`$XDG_DATA_HOME/laneway/worktrees`); the task records it (`workspace`) and every later turn of
every agent on the task works in it. A task whose workflow names no repository works where the
worker runs, as before.

Which worktree a task has is decided by the database: the record is written by an update
conditional on the task having none, so two workers racing on one task agree on one path,
branch and base commit; git itself is then driven under a per-task lock (`core.gitwork`).
A worktree lives on the machine that made it (the record names the host): only workers there
claim the task's runs (core.runs), unless the task's workflow has a remote: then its branch
travels through it (core.services.travel) and a worker on any machine re-creates the worktree
from the remote before its turn, the record moving to its host.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from core import gitwork, hosts, ids
from core.errors import LanewayError
from core.logs import logger
from core.model import Task
from core.services import travel
from core.store import tables as t

if TYPE_CHECKING:
    from core.services.tasks import TaskService
    from core.services.workflows import WorkflowService
    from core.store.database import Store

BRANCH_PREFIX = "laneway/"


class Peers(Protocol):
    """The host's parts a task's worktree is read and written with (the agent wing hands its
    own port, the services theirs)."""

    @property
    def store(self) -> Store: ...

    @property
    def tasks(self) -> TaskService: ...

    @property
    def workflows(self) -> WorkflowService: ...


def root() -> Path:
    """Where worktrees are made: `LANEWAY_WORKTREES`, else laneway's data directory."""
    configured = os.environ.get("LANEWAY_WORKTREES")
    if configured:
        return Path(configured).expanduser().resolve()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return (Path(data) / "laneway" / "worktrees").resolve()


def host_name() -> str:
    return hosts.name()


def checked(repository: str | None, base_branch: str | None) -> tuple[str | None, str | None]:
    """The repository (absolute, its top) and base branch as they should be stored, checked
    now so a bad one is refused where it is named; (None, None) clears them."""
    if not repository:
        if base_branch:
            raise LanewayError(f"base branch {base_branch!r}: no repository to take it from")
        return None, None
    top = gitwork.repository(repository)
    if base_branch:
        gitwork.branch_commit(top, base_branch)
    return str(top), base_branch or None


def wanted(peers: Peers, task: Task) -> tuple[str | None, str | None]:
    """The repository and base branch the task's agents should work in (the task's own, else
    its workflow's), or (None, None)."""
    if task.repository:
        return task.repository, task.base_branch
    if task.workflow_id is None:
        return None, None
    wf = peers.workflows.by_id(task.workflow_id)
    return wf.repository, wf.base_branch


def workspace_for(peers: Peers, task_id: str, task: Task | None = None) -> Path:
    """The directory a turn of `task_id` runs in: its worktree (made on its first turn), or the
    worker's own directory when no repository is named. A bad repository or branch raises a
    one-line LanewayError naming it (the runtime reports it as the turn's failure, R2).
    `task`: the task as the caller has just read it."""
    return checkout_for(peers, task_id, task)[0]


def checkout_for(peers: Peers, task_id: str, task: Task | None = None) -> tuple[Path, Path | None]:
    """`workspace_for`, and the repository the worktree is of (None: no worktree): what its
    git files are found from (`gitwork.worktree_git`), never the worktree's own `.git`."""
    if task is None or task.id != task_id:
        task = peers.tasks.get(task_id)
    record = task.workspace
    if record is None:
        repository, base_branch = wanted(peers, task)
        if repository is None:
            return Path.cwd(), None
        record = _claim(peers, task, repository, base_branch)
    if record.get("host") != host_name():
        # its branch travels through the workflow's remote: made again here from there (else
        # the claim never gave this host the run: a race, refused in one line)
        record = recreate(peers, task)
    repo = travel.checkout(record)
    if not repo.is_dir():
        raise LanewayError(f"task {task.id}: repository {repo} is gone")
    path = Path(record["path"])
    made = gitwork.ensure_worktree(repo, path, record["branch"], record["base_commit"])
    if made:
        logger.bind(task_id=task.id, path=str(path), branch=record["branch"]).info(
            "made the task's worktree"
        )
    if record.get("removed_at"):
        # worked again after it ended: the worktree is back, from the branch that kept it all
        _set_removed(peers.store, task.id, None)
    return path, repo


def recreate(peers: Peers, task: Task) -> dict[str, Any]:
    """Re-create on this host, from its workflow's remote, the worktree the task's previous
    turn left on another host (core.services.travel); the record as it now stands. One call
    that a setup step can follow (it runs after the worktree exists, as after `_claim`)."""
    return travel.recreate_here(peers, task, root())


def _claim(peers: Peers, task: Task, repository: str, base_branch: str | None) -> dict[str, Any]:
    """Record the task's worktree unless another worker did first; the record that stands."""
    repo = gitwork.repository(repository)
    branch_from = base_branch or gitwork.default_branch(repo)
    record = {
        "repository": str(repo),
        "base_branch": branch_from,
        "branch": BRANCH_PREFIX + task.id[-8:],
        "path": str(root() / task.id),
        "base_commit": gitwork.branch_commit(repo, branch_from),
        "host": host_name(),
        "created_at": ids.now(),
    }
    with peers.store.transaction() as uow:
        uow.conn.execute(
            sa.update(t.tasks)
            .where(t.tasks.c.id == task.id, t.tasks.c.workspace.is_(None))
            .values(workspace=json.dumps(record))
        )
    standing = peers.tasks.get(task.id).workspace
    assert standing is not None
    return dict(standing)


def diff(peers: Peers, ref: str) -> dict[str, Any]:
    """CLI.md `task diff`: the task's worktree against its base commit."""
    task = peers.tasks.get(ref)
    record = task.workspace
    if record is None:
        raise LanewayError(f"task {task.id} has no worktree (its first turn makes one)")
    path = Path(record["path"])
    base = record["base_commit"]
    if record.get("removed_at"):
        # the checkout is gone; its branch holds everything
        change = gitwork.branch_diff(travel.checkout(record), base, record["branch"])
    else:
        try:
            change = gitwork.diff(travel.checkout(record), path, base)
        except LanewayError:
            # A task that ended is retired by another process: its work committed to its
            # branch, then the checkout removed (file by file), then the record marked. A diff
            # read after the commit and before the mark finds no checkout here, or half of one;
            # the branch holds everything. The task is read again: it may have reached its end
            # while git read the checkout.
            if record.get("host") != host_name() or (
                path.exists() and not _ended(peers, peers.tasks.get(ref))
            ):
                raise
            change = gitwork.branch_diff(travel.checkout(record), base, record["branch"])
    return {
        "task_id": task.id,
        "branch": record["branch"],
        "base": base,
        **gitwork.as_json(change),
    }


def _ended(peers: Peers, task: Task) -> bool:
    """Whether `task` is one a worktree is retired for: archived, or at its workflow's
    terminal step when the workflow retires worktrees there (`Workflow.retires_worktree_at`)."""
    if task.archived_at is not None:
        return True
    if task.workflow_id is None or task.workflow_step_id is None:
        return False
    return peers.workflows.by_id(task.workflow_id).retires_worktree_at(task.workflow_step_id)


def retire(store: Store, task: Task, why: str, room: CleanupRoom | None = None) -> None:
    """The task ended (`why`: archived, deleted, done): commit what is uncommitted in its
    worktree to its branch, remove the worktree, keep the branch. Never stops the ending: a
    worktree that cannot be retired is logged and left as it is."""
    record = task.workspace
    if record is None or record.get("removed_at"):
        return
    log = logger.bind(task_id=task.id, path=record["path"], branch=record["branch"])
    if record.get("host") != host_name():
        log.warning(f"task {why}; its worktree is on host {record.get('host')!r}: left there")
        return
    cleanup(store, task, Path(record["path"]), room)
    try:
        commit = gitwork.retire(
            travel.checkout(record),
            Path(record["path"]),
            record["branch"],
            f"laneway: work left uncommitted in task {task.id} when it was {why}",
        )
    except LanewayError as exc:
        log.warning(f"task {why}; its worktree was left in place: {exc}")
        return
    log.bind(commit=commit).info(f"task {why}; its worktree removed, its branch kept")
    if why == "deleted":
        return
    _set_removed(store, task.id, ids.now())


CLEANUP_TIMEOUT = 120.0
"""Seconds a workflow's cleanup command may run before it is killed (the removal goes on)."""
CLEANUP_TAIL = 2000
"""The characters of a cleanup's output kept for its log record (its last ones)."""


class CleanupRoom(Protocol):
    """Where a cleanup runs (`Peers.cleanup_room`): its command line and environment, put in
    the room of the task's sandboxed agent when it had one."""

    def __call__(
        self, task: Task, path: Path, argv: tuple[str, ...], env: dict[str, str]
    ) -> tuple[tuple[str, ...], dict[str, str]]: ...


def cleanup(store: Store, task: Task, path: Path, room: CleanupRoom | None = None) -> None:
    """Run the task's workflow's cleanup command (`workflow set --cleanup`) in its worktree,
    before it is removed: in a process group of its own, with the base environment an agent
    gets and the task's id, bounded in time and in the output kept (its tail, logged).
    Never stops the removal: a failure is a WARNING."""
    if task.workflow_id is None or not path.is_dir():
        return
    with store.read() as conn:
        command = conn.execute(
            sa.select(t.workflows.c.cleanup).where(t.workflows.c.id == task.workflow_id)
        ).scalar()
    if not command:
        return
    base = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
    env = {k: os.environ[k] for k in base if k in os.environ}
    env["LANEWAY_TASK_ID"] = task.id
    log = logger.bind(task_id=task.id, path=str(path), cleanup=command)
    argv: tuple[str, ...] = ("/bin/sh", "-c", command)
    if room is not None:
        try:
            argv, env = room(task, path, argv, env)
        except LanewayError as exc:
            log.warning(f"the workflow's cleanup not run: {exc}; removing the worktree")
            return
    proc = subprocess.Popen(
        argv,
        cwd=path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        process_group=0,
    )
    tail = bytearray()

    def drain() -> None:
        assert proc.stdout is not None
        while chunk := os.read(proc.stdout.fileno(), 65536):
            tail.extend(chunk)
            del tail[: max(0, len(tail) - CLEANUP_TAIL)]

    reader = threading.Thread(target=drain, name="laneway-cleanup", daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=CLEANUP_TIMEOUT)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what it left running goes with it
        proc.wait()
        reader.join(timeout=5)
    said = bytes(tail).decode("utf-8", "replace").strip()
    if code == 0:
        log.bind(output=said).info("ran the workflow's cleanup")
    else:
        why = f"exited with status {code}" if code is not None else "timed out"
        log.bind(output=said).warning(f"the workflow's cleanup {why}; removing the worktree")


def retire_at_terminal(
    peers: Peers, task_id: str, step_id: str, room: CleanupRoom | None = None
) -> None:
    """A task arrived at `step_id`, where its worktree retires (the caller asked
    `Workflow.retires_worktree_at`): it is retired as archiving does. Never fails the arrival:
    anything in the way is a warning."""
    try:
        retire(peers.store, peers.tasks.get(task_id), "done", room)
    except Exception as exc:  # noqa: BLE001 - the arrival stands whatever git or the store say
        logger.bind(task_id=task_id, step_id=step_id).warning(
            f"task done; its worktree could not be retired: {exc}"
        )


def _set_removed(store: Store, task_id: str, at: str | None) -> None:
    """Set (or clear, `at` None) the record's `removed_at` on the record as it stands now, its
    row locked: the record read before a retirement's cleanup and git work (up to minutes)
    is not written back over what a turn's push, a merge or a pull request recorded
    meanwhile."""
    with store.transaction() as uow:
        raw = uow.conn.execute(
            sa.select(t.tasks.c.workspace)
            .where(t.tasks.c.id == task_id)
            .with_for_update(key_share=True)
        ).scalar()
        if raw is None:
            return
        record = {k: v for k, v in json.loads(raw).items() if k != "removed_at"}
        if at is not None:
            record["removed_at"] = at
        uow.conn.execute(
            sa.update(t.tasks).where(t.tasks.c.id == task_id).values(workspace=json.dumps(record))
        )
