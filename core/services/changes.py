"""A task's change leaving the board: merged into a base branch, or pushed to a remote
(CLI.md `task merge` / `task push`, docs/workspaces.md "From card to merged change").

The git effects are `core.gitmerge`'s (no checkout touched, the base moved by compare-and-swap,
a push leased against what laneway last pushed). What this adds is the task's side: its
worktree's uncommitted work committed first (by laneway, saying so), the outcome recorded in
the task's workspace record (`merge`, `push`, `conflict`) by a compare-and-set on that record,
the `task.merged` / `task.pushed` events, and, for the durable kinds (`merge_branch`,
`push_branch`), the fence: a caller that names its ledger claim has it checked just before a
ref moves, so a process that lost its claim never moves one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from core import board, faults, gitmerge, ids, ledger
from core.errors import LanewayError
from core.logs import logger
from core.model import Task, Workflow
from core.plugin.kinds import Forge, ForgeConfig
from core.plugin.views import Claim
from core.services import travel, worktrees
from core.services.base import Lazy, Service
from core.store import events
from core.store import tables as t

if TYPE_CHECKING:
    from core.services.comments import CommentService
    from core.services.peers import Peers
    from core.services.tasks import TaskService
    from core.services.workflows import WorkflowService

STRATEGIES = gitmerge.STRATEGIES


class Fenced(LanewayError):
    """The caller's claim was lost (its process was fenced, or another took the marker)."""

    code = "fenced"
    http_status = 409


class ChangeService(Service):
    """Merging and pushing a task's branch."""

    def __init__(
        self,
        peers: Peers,
        *,
        comments: Lazy[CommentService],
        tasks: Lazy[TaskService],
        workflows: Lazy[WorkflowService],
    ) -> None:
        super().__init__(peers)
        self._comments = comments
        self._tasks = tasks
        self._workflows = workflows

    # -- merge ----------------------------------------------------------------------------------

    def merge(
        self,
        ref: str,
        *,
        strategy: str | None = None,
        into: str | None = None,
        claim: Claim | None = None,
    ) -> dict[str, Any]:
        """Merge the task's branch into `into` (default: its base branch) by `strategy`
        (merge, squash or rebase; default merge). Raises `gitmerge.MergeConflict` naming every
        conflicting path (nothing changed; the conflict recorded on the task)."""
        self._require_writer()
        how = strategy or "merge"
        if how not in STRATEGIES:
            raise LanewayError(f"strategy {how!r}: must be one of {', '.join(STRATEGIES)}")
        task = self._tasks().get(ref)
        record, repo = self._worktree(task)
        target = into or record["base_branch"]
        if target == record["branch"]:
            raise LanewayError(f"task {task.id}: cannot merge {target} into itself")
        if gitmerge.ref_commit(repo, f"refs/heads/{target}") is None:
            raise LanewayError(f"task {task.id}: repository {repo} has no branch {target!r}")
        committed = self._commit_uncommitted(task, record, "merge")
        travel.bring_home(record, repo, worktrees.root() / task.id)
        log = logger.bind(task_id=task.id, branch=record["branch"], into=target, strategy=how)
        try:
            landed = gitmerge.land(
                repo,
                branch=record["branch"],
                into=target,
                strategy=how,
                subject=_subject(task, record["branch"], target, how),
                key=claim.entry_id if claim is not None else None,
                before_swap=self._fence(claim),
                after_commit=lambda: faults.reach("merge.after_commit"),
            )
        except gitmerge.MergeConflict as exc:
            conflict = {"into": target, "strategy": how, "paths": list(exc.paths), "at": ids.now()}
            self._amend(task.id, lambda r: {**r, "conflict": conflict})
            log.bind(paths=list(exc.paths)).info("merge refused: conflicts")
            raise
        if not landed.already:
            faults.reach("merge.after_ref")
        merged = {"into": target, "strategy": how, "commit": landed.commit, "at": ids.now()}

        def done(r: dict[str, Any]) -> dict[str, Any]:
            kept = {k: v for k, v in r.items() if k != "conflict"}
            return {**kept, "merge": merged}

        self._amend(
            task.id,
            done,
            event=(
                "task.merged",
                {
                    "branch": record["branch"],
                    "commit": landed.commit,
                    "into": target,
                    "strategy": how,
                },
            ),
        )
        log.bind(commit=landed.commit, already=landed.already).info("task's branch merged")
        return {
            "task_id": task.id,
            "branch": record["branch"],
            "into": target,
            "strategy": how,
            "commit": landed.commit,
            "already": landed.already,
            "committed": committed,
            "notice": _notice(repo, target, landed),
        }

    def conflict_back(self, ref: str, step: str, paths: tuple[str, ...], into: str) -> str:
        """Send a task whose merge conflicted back to `step` (an arrival, E1, only while it
        still stands where it stood); the step's name."""
        from core import arrival

        self._require_writer()
        task = self._tasks().get(ref)
        if task.workflow_id is None:
            raise LanewayError(f"task {task.id} has no workflow to send it back in")
        wf = self._workflows().by_id(task.workflow_id)
        target = self._workflows().step(wf, step)
        arrival.move(
            self.peers.arrivals,
            task.id,
            target.id,
            path="E1",
            label="merge_conflict",
            expected_step_id=task.workflow_step_id,
        )
        logger.bind(task_id=task.id, to_step=target.name, paths=list(paths), into=into).info(
            "merge conflicted: task sent back"
        )
        return target.name

    # -- push -----------------------------------------------------------------------------------

    def push(self, ref: str, *, claim: Claim | None = None) -> dict[str, Any]:
        """Push the task's branch to its workflow's remote: `<commit>:refs/heads/<branch>`,
        leased against what laneway last pushed there (someone else's push is refused, never
        overwritten); a branch already there is a no-op."""
        self._require_writer()
        task = self._tasks().get(ref)
        record, repo = self._worktree(task)
        remote = self._remote(task)
        self._commit_uncommitted(task, record, "push")
        branch = record["branch"]
        commit = gitmerge.ref_commit(repo, f"refs/heads/{branch}")
        if commit is None:
            raise LanewayError(f"task {task.id}: repository {repo} has no branch {branch!r}")
        last = record.get("push") or {}
        last_pushed = last.get("commit") if last.get("remote") == remote else None
        fence = self._fence(claim)
        if fence is not None:
            fence()
        sent = gitmerge.push(repo, remote, branch, commit, last_pushed)
        if sent:
            faults.reach("push.after_push")
        elif last_pushed == commit:
            # pushed and recorded before: nothing happened, nothing to say again
            return {"task_id": task.id, "branch": branch, "remote": remote, "commit": commit}
        pushed = {"remote": remote, "commit": commit, "at": ids.now()}
        self._amend(
            task.id,
            lambda r: {**r, "push": pushed},
            event=("task.pushed", {"branch": branch, "commit": commit, "remote": remote}),
        )
        logger.bind(task_id=task.id, branch=branch, remote=remote, commit=commit, sent=sent).info(
            "task's branch pushed" if sent else "task's branch already on the remote"
        )
        return {"task_id": task.id, "branch": branch, "remote": remote, "commit": commit}

    # -- pull requests --------------------------------------------------------------------------

    def set_forge(self, ref: str, kind: str, *, repo: str | None, url: str | None,
                  token_env: str | None) -> Workflow:  # fmt: skip
        """Where the workflow's pull requests are opened (`workflow set --forge`): a forge a
        loaded plugin declares, the repository there (OWNER/NAME), its API's URL (default the
        forge's own) and the variable the token is read from at run time (never stored). An
        empty kind clears it."""
        self._require_writer()
        wf = self._workflows().get(ref)
        value: dict[str, Any] | None = None
        if kind.strip():
            if self.peers.bundle.registry.forge(kind) is None:
                known = ", ".join(sorted(self.peers.bundle.registry.forges)) or "none"
                raise LanewayError(f"forge {kind!r}: no loaded plugin declares it ({known})")
            if not repo or repo.count("/") != 1 or not all(repo.split("/")):
                raise LanewayError(f"forge repository {repo!r}: give --forge-repo OWNER/NAME")
            if not token_env:
                raise LanewayError("forge: give --forge-token-env VAR (the token is read there)")
            value = {"kind": kind, "repo": repo, "url": url or None, "token_env": token_env}
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.update(t.workflows)
                .where(t.workflows.c.id == wf.id)
                .values(forge=json.dumps(value) if value is not None else None)
            )
            board.bump(uow)
        self.peers.repository.forget(wf.id)
        return self._workflows().by_id(wf.id)

    def _forge(self, task: Task) -> tuple[Forge, ForgeConfig]:
        wf = self._workflows().by_id(task.workflow_id) if task.workflow_id else None
        stored = wf.forge if wf is not None else None
        if not stored:
            raise LanewayError(
                f"task {task.id}: its workflow has no forge (`laneway workflow set W --forge ...`)"
            )
        forge = self.peers.bundle.registry.forge(str(stored["kind"]))
        if forge is None:
            raise LanewayError(f"forge {stored['kind']!r}: no loaded plugin declares it")
        token_env = str(stored.get("token_env") or "")
        token = os.environ.get(token_env) if token_env else None
        if not token:
            raise LanewayError(f"forge {stored['kind']}: ${token_env} is not set in this process")
        url = stored.get("url")
        return forge, ForgeConfig(str(stored["kind"]), str(stored["repo"]), url, token)

    def pull_request(
        self,
        ref: str,
        *,
        title: str | None = None,
        body: str | None = None,
        draft: bool = False,
        claim: Claim | None = None,
    ) -> dict[str, Any]:
        """Push the task's branch, then open its pull request on the workflow's forge, or
        update the one the branch has (keyed by the branch: never a second)."""
        self._require_writer()
        task = self._tasks().get(ref)
        record, _ = self._worktree(task)
        forge, config = self._forge(task)
        self.push(task.id, claim=claim)
        fence = self._fence(claim)
        if fence is not None:
            fence()
        opened = forge.open_or_update(
            config,
            record["branch"],
            record["base_branch"],
            title or task.title,
            body if body is not None else task.description,
            draft,
        )
        faults.reach("pull_request.after_open")
        shown = {"forge": forge.name, "number": opened.number, "url": opened.url,
                 "state": opened.state, "at": ids.now()}  # fmt: skip
        self._amend(
            task.id,
            lambda r: {**r, "pull_request": shown},
            event=("task.pull_request", {"branch": record["branch"], **shown}),
        )
        return {"task_id": task.id, "branch": record["branch"], **shown}

    def sync_pull_request(
        self, ref: str, *, moves: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Read the task's pull request back: each review comment not seen yet becomes a
        comment on the task (on its line when it was on one; firing on_comment, once per
        review comment whoever syncs), and a
        state that changed (merged, closed) is recorded with a `task.pull_request` event.

        :param moves: the step to send the task to for a state (`merged`, `closed`). The task
            is sent before the new state is recorded: a sync that dies or fails between the
            two leaves the change unrecorded, and the next sync sends the task (were the state
            recorded first, every later sync would find nothing changed and the task would
            stand where it is for good). The move is made only from the step the task stood
            at when this sync read it."""
        self._require_writer()
        task = self._tasks().get(ref)
        record, _ = self._worktree(task)
        known = record.get("pull_request")
        if not known:
            raise LanewayError(f"task {task.id} has no pull request (`open_pull_request`)")
        forge, config = self._forge(task)
        added = 0
        for comment in forge.review_comments(config, int(known["number"])):
            made = self._comments().add_once(
                task.id,
                f"{forge.name}:{config.repo}:{comment.id}",
                comment.body,
                author=f"{forge.name}:{comment.author}",
                # an empty path: said of the pull request as a whole, a plain comment
                file=comment.path or None,
                line=comment.line if comment.path else None,
            )
            added += made is not None
        now = forge.pull_request(config, int(known["number"]))
        changed = now.state != known.get("state")
        step = (moves or {}).get(now.state) if changed else None
        if step is not None:
            self._send(task, step, f"pull_request_{now.state}")
            faults.reach("pull_request.after_move")
        if changed:
            shown = {**known, "state": now.state, "at": ids.now()}

            def moved(r: dict[str, Any]) -> dict[str, Any]:
                return {**r, "pull_request": shown}

            self._amend(
                task.id,
                moved,
                event=("task.pull_request", {"branch": record["branch"], **shown}),
            )
        return {"task_id": task.id, "state": now.state, "comments_added": added,
                "changed": changed}  # fmt: skip

    def send(self, ref: str, step: str, why: str) -> str:
        """Move the task to `step` (an arrival, E1) while it stands where it stood; the
        step's name. What a forge's answer (a merged pull request) moves it by."""
        self._require_writer()
        return self._send(self._tasks().get(ref), step, why)

    def _send(self, task: Task, step: str, why: str) -> str:
        from core import arrival

        if task.workflow_id is None:
            raise LanewayError(f"task {task.id} has no workflow")
        target = self._workflows().step(self._workflows().by_id(task.workflow_id), step)
        arrival.move(
            self.peers.arrivals,
            task.id,
            target.id,
            path="E1",
            label=why,
            expected_step_id=task.workflow_step_id,
        )
        return target.name

    # -- shared ---------------------------------------------------------------------------------

    def _worktree(self, task: Task) -> tuple[dict[str, Any], Path]:
        record = task.workspace
        if record is None:
            raise LanewayError(
                f"task {task.id} has no worktree (its first turn makes one): nothing to merge "
                "or push"
            )
        repo = Path(record["repository"])
        if not repo.is_dir():
            raise LanewayError(f"task {task.id}: repository {repo} is gone")
        return dict(record), repo

    def _remote(self, task: Task) -> str:
        remote = None
        if task.workflow_id is not None:
            remote = self._workflows().by_id(task.workflow_id).remote
        if not remote:
            raise LanewayError(
                f"task {task.id}: its workflow has no remote (`laneway workflow set W --remote R`)"
            )
        return remote

    def _commit_uncommitted(self, task: Task, record: Mapping[str, Any], why: str) -> str | None:
        """What the task's worktree holds uncommitted, committed to its branch by laneway."""
        from core.services import worktrees

        if record.get("removed_at") or record.get("host") != worktrees.host_name():
            return None
        path = Path(record["path"])
        made = gitmerge.commit_all(
            travel.checkout(record),
            path,
            f"laneway: work left uncommitted in task {task.id}, committed to {why} it",
        )
        if made is not None:
            logger.bind(task_id=task.id, path=str(path), commit=made).info(
                f"committed what the worktree held uncommitted, to {why} it"
            )
        return made

    def _fence(self, claim: Claim | None) -> Callable[[], None] | None:
        """Just before a ref moves: is the caller's claim still its own? Its epoch still live
        (the liveness lock checked) and its marker still in progress under that epoch."""
        if claim is None:
            return None

        def check() -> None:
            live = self.peers.live_epoch()
            with self.peers.store.read() as conn:
                held = ledger.holds(conn, claim.entry_id, claim.position, claim.kind, claim.epoch)
            if live != claim.epoch or not held:
                logger.bind(entry_id=claim.entry_id, kind=claim.kind, epoch=claim.epoch).warning(
                    "claim lost before the ref moved: nothing moved"
                )
                raise Fenced(
                    f"{claim.kind} of entry {claim.entry_id}: this process lost its claim; "
                    "no ref moved"
                )

        return check

    def _amend(
        self,
        task_id: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        event: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        """Change the task's workspace record by compare-and-set on the record as read: a
        concurrent change (a retirement, another merge) is read again, never overwritten."""
        for _ in range(50):
            with self.peers.store.read() as conn:
                raw = conn.execute(
                    sa.select(t.tasks.c.workspace).where(t.tasks.c.id == task_id)
                ).scalar()
            if raw is None:
                return
            new = json.dumps(change(json.loads(raw)))
            with self.peers.store.transaction() as uow:
                done = uow.conn.execute(
                    sa.update(t.tasks)
                    .where(t.tasks.c.id == task_id, t.tasks.c.workspace == raw)
                    .values(workspace=new)
                )
                if done.rowcount == 1:
                    if event is not None:
                        events.record(uow, event[0], task_id, **event[1])
                    return
        raise LanewayError(f"task {task_id}: its workspace record kept changing; try again")


def _subject(task: Task, branch: str, into: str, strategy: str) -> str:
    if strategy == "merge":
        return f"Merge branch '{branch}' into {into}\n\nTask {task.id}: {task.title}"
    return f"{task.title}\n\nTask {task.id} ({branch}), by laneway"


def _notice(repo: Path, into: str, landed: gitmerge.Landed) -> str | None:
    """One line for the person whose checkout has `into` checked out: its files still show
    the commit before the merge, and how to bring them up to it (uncommitted work kept)."""
    if landed.already:
        return None
    where = gitmerge.checked_out_in(repo, into)
    if not where:
        return None
    path = where[0]
    return (
        f"{into} is checked out in {path}, whose files were left as they were: run "
        f"`git -C {path} read-tree -m -u {landed.before[:12]} {into}` to see the merge there "
        "(your uncommitted changes are kept)"
    )


__all__ = ["STRATEGIES", "ChangeService", "Claim", "Fenced"]
