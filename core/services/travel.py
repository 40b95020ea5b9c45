"""A task's branch travelling through its workflow's remote, so any machine's worker can take
any turn of the task (docs/operations.md "Many machines", issue 43 item 2).

At the end of each turn the worker that ran it commits what the worktree holds uncommitted (a
commit by laneway, saying so) and pushes the task's branch, `laneway/<last 8 of its id>`, to
the remote under the same name: laneway's own branch, never one of the person's, leased
against the commit laneway last pushed or fetched there (`core.gitmerge.push`: someone else's
push is refused, never overwritten). The task's worktree record keeps that commit (`push`).

A worker on another machine that claims the task's next run re-creates the worktree from the
remote before the turn (`core.gittravel.recreate`) and moves the record to its host by a
conditional update on the record as it read it. A push that fails (the remote down) marks the
record `held`: the claim's statement (core.runs) then gives the task's runs to its own host
only, whose worktree has the work, until a push succeeds again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from core import faults, gitmerge, gittravel, gitwork, hosts, ids
from core.errors import LanewayError
from core.logs import logger
from core.store import events
from core.store import tables as t

if TYPE_CHECKING:
    from core.model import Task
    from core.services.worktrees import Peers
    from core.store.database import Store


def remote_of(peers: Peers, task: Task) -> str | None:
    """The remote the task's branch travels through (its workflow's), or None."""
    if task.workflow_id is None:
        return None
    return peers.workflows.by_id(task.workflow_id).remote or None


def checkout(record: Mapping[str, Any]) -> Path:
    """The repository the worktree on the record's host belongs to."""
    return Path(record.get("checkout") or record["repository"])


def known_repos(record: Mapping[str, Any]) -> tuple[Path, ...]:
    """The repositories the task's worktrees were made from on this machine: the person's and,
    once its branch travelled here, laneway's mirror (what a worktree left here belongs to)."""
    found = [Path(record["repository"])]
    if record.get("checkout"):
        found.append(Path(record["checkout"]))
    return tuple(found)


def travels(record: Mapping[str, Any], remote: str | None) -> bool:
    """Another machine may re-create this worktree: a remote, a push on it, none failed since
    (core.runs `_travels` says the same in the claim's statement)."""
    return bool(remote) and not record.get("held") and bool(record.get("push"))


def carry(peers: Peers, task_id: str, known: Task | None = None) -> str | None:
    """End of a turn: commit and push the task's branch when its workflow has a remote. The
    commit pushed; None when there is nothing to carry (no remote, no worktree here) or the
    push failed (then the record is `held` and the failure logged and recorded as an event).
    `known`: the task as the turn read it (its workflow decides; the record is read again)."""
    if known is not None and known.id == task_id and remote_of(peers, known) is None:
        return None  # the common case: no remote, nothing read
    task = peers.tasks.get(task_id)
    record = task.workspace
    remote = remote_of(peers, task)
    if remote is None or record is None or record.get("removed_at"):
        return None
    if record.get("host") != hosts.name():
        return None
    repo, path, branch = checkout(record), Path(record["path"]), str(record["branch"])
    log = logger.bind(task_id=task.id, branch=branch, remote=remote)
    try:
        gitmerge.commit_all(
            repo,
            path,
            f"laneway: work left uncommitted by a turn of task {task.id}, committed to carry it "
            f"to {remote}",
        )
        last = record.get("push") or {}
        url = gittravel.remote_url(repo, remote)
        if url == remote and last.get("remote") == remote and last.get("url"):
            url = str(last["url"])  # a name this host's repository (laneway's own) lacks
        commit = gitmerge.ref_commit(repo, f"refs/heads/{branch}")
        if commit is None:
            raise LanewayError(f"repository {repo} has no branch {branch!r}")
        last_pushed = last.get("commit") if last.get("remote") == remote else None
        faults.reach("travel.before_push")
        sent = gitmerge.push(repo, url, branch, commit, last_pushed)
        if sent:
            faults.reach("travel.after_push")
    except LanewayError as exc:
        held = {"at": ids.now(), "why": str(exc)}
        amend(peers.store, task.id, lambda r: {**r, "held": held},
              event=("task.push_failed", {"branch": branch, "remote": remote,
                                          "error": str(exc)}))  # fmt: skip
        log.bind(error=str(exc)).warning(
            "the task's branch could not be pushed: the task stays on this host, its work here"
        )
        return None
    pushed = {"remote": remote, "url": url, "commit": commit, "at": ids.now()}

    def done(r: dict[str, Any]) -> dict[str, Any]:
        return {**{k: v for k, v in r.items() if k != "held"}, "push": pushed}

    amend(peers.store, task.id, done,
          event=("task.pushed", {"branch": branch, "commit": commit, "remote": remote})
          if sent else None)  # fmt: skip
    if record.get("held"):
        log.info("the task's branch pushed again: its runs may go to any host")
    log.bind(commit=commit, sent=sent).debug("task's branch carried to the remote")
    return commit


def recreate_here(peers: Peers, task: Task, root: Path) -> dict[str, Any]:
    """Re-create on this host the worktree another host's turn left on the remote, and move
    the record here (a conditional update on the record as read: another host that moved it
    first wins, and this one's turn fails R2 saying so). The record as it now stands."""
    with peers.store.read() as conn:
        raw = conn.execute(sa.select(t.tasks.c.workspace).where(t.tasks.c.id == task.id)).scalar()
    if raw is None:
        raise LanewayError(f"task {task.id} has no worktree")
    record: dict[str, Any] = json.loads(raw)
    remote = remote_of(peers, task)
    if not travels(record, remote):
        raise LanewayError(
            f"task {task.id}'s worktree {record['path']} is on host {record.get('host')!r}; "
            "a worker there runs its turns"
        )
    assert remote is not None
    me = hosts.name()
    home = record.get("home_host") or record.get("host")
    repo = Path(record["repository"])
    url = str(record["push"].get("url") or gittravel.remote_url(repo, remote))
    if me != home or not repo.is_dir():
        repo = gittravel.mirror(root, url)
    path = root / task.id
    commit, kept = gittravel.recreate(
        repo, url, path, str(record["branch"]), gittravel.left_ref(task.id), known_repos(record)
    )
    log = logger.bind(task_id=task.id, branch=record["branch"], commit=commit, path=str(path))
    if kept is not None:
        log.bind(kept=kept).warning("uncommitted work left in the old worktree here kept")
    moved = {
        **record,
        "host": me,
        "path": str(path),
        "checkout": str(repo),
        "home_host": home,
        "push": {**record["push"], "url": url, "commit": commit},
    }
    moved.pop("removed_at", None)
    with peers.store.transaction() as uow:
        done = uow.conn.execute(
            sa.update(t.tasks)
            .where(t.tasks.c.id == task.id, t.tasks.c.workspace == raw)
            .values(workspace=json.dumps(moved))
        )
        if done.rowcount != 1:
            raise LanewayError(f"task {task.id}'s worktree moved meanwhile; this turn is not here")
        events.record(
            uow, "task.worktree_moved", task.id, branch=record["branch"], commit=commit,
            from_host=record.get("host"), to_host=me,
        )  # fmt: skip
    log.bind(from_host=record.get("host")).info("re-created the task's worktree from the remote")
    return moved


def amend(
    store: Store,
    task_id: str,
    change: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    event: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """Change the task's workspace record by compare-and-set on the record as read."""
    for _ in range(50):
        with store.read() as conn:
            raw = conn.execute(
                sa.select(t.tasks.c.workspace).where(t.tasks.c.id == task_id)
            ).scalar()
        if raw is None:
            return
        with store.transaction() as uow:
            done = uow.conn.execute(
                sa.update(t.tasks)
                .where(t.tasks.c.id == task_id, t.tasks.c.workspace == raw)
                .values(workspace=json.dumps(change(json.loads(raw))))
            )
            if done.rowcount == 1:
                if event is not None:
                    events.record(uow, event[0], task_id, **event[1])
                return
    raise LanewayError(f"task {task_id}: its workspace record kept changing")


def bring_home(record: Mapping[str, Any], repo: Path, left_here: Path) -> None:
    """Before `task merge` in `repo` on this host: when the task's worktree now lives on
    another host (its branch travelled), the branch in `repo` is brought to the commit last
    pushed from there, so the merge lands every turn's work. A worktree the task left on this
    host (`left_here`) is set aside first (its uncommitted work kept, as on re-creation). Only
    a fast-forward: a local branch with commits the remote lacks is refused in one line."""
    pushed = record.get("push") or {}
    if record.get("host") == hosts.name() or not pushed.get("url") or not pushed.get("commit"):
        return
    branch = str(record["branch"])
    local = gitmerge.ref_commit(repo, f"refs/heads/{branch}")
    if local == pushed["commit"]:
        return
    gittravel.set_aside(
        (repo, *known_repos(record)), left_here, gittravel.left_ref(str(left_here.name))
    )
    commit = gittravel.fetch(repo, str(pushed["url"]), branch)
    if local is not None and not gitmerge.is_ancestor(repo, local, commit):
        raise LanewayError(
            f"branch {branch} in {repo} has commits the remote's lacks; push them or merge "
            f"on host {record.get('host')!r}"
        )
    gitwork.git(repo, "update-ref", f"refs/heads/{branch}", commit)
    logger.bind(branch=branch, commit=commit, repo=str(repo)).info(
        "brought the task's branch home from the remote before merging it"
    )
