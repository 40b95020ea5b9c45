from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

import sqlalchemy as sa

from core import ids, outbox
from core.errors import Conflict, LanewayError, NotFound
from core.logs import logger
from core.model import TASK_STATES, Step, Task, Workflow
from core.services.base import Lazy, Service
from core.services.refs import check_search, find_task, resolve_task
from core.store import events, rows, waits
from core.store import tables as t
from core.store.database import UnitOfWork
from core.text import require_text

if TYPE_CHECKING:
    from core.services.blockers import BlockerService
    from core.services.peers import Peers
    from core.services.runs import RunService
    from core.services.sessions import SessionService
    from core.services.triggers import TriggerService
    from core.services.workflows import WorkflowService
    from core.services.workspace import WorkspaceService
    from core.transition import Change

TASKS = t.tasks
# The routes that move a task import `core.arrival` (and the entry, ledger and transition
# behind it) when they run: reading tasks needs none of it.


class TaskService(Service):
    """Tasks, and every user-reachable route that changes a task's step."""

    def __init__(
        self,
        peers: Peers,
        *,
        blockers: Lazy[BlockerService],
        runs: Lazy[RunService],
        sessions: Lazy[SessionService],
        triggers: Lazy[TriggerService],
        workflows: Lazy[WorkflowService],
        workspace: Lazy[WorkspaceService],
    ) -> None:
        super().__init__(peers)
        self._blockers = blockers
        self._runs = runs
        self._sessions = sessions
        self._triggers = triggers
        self._workflows = workflows
        self._workspace = workspace

    def create(
        self,
        *,
        workflow: str,
        title: str,
        description: str = "",
        step: str | None = None,
        project: str | None = None,
        priority: str = "none",
        repository: str | None = None,
        base_branch: str | None = None,
        parent: str | None = None,
    ) -> Task:
        """Create a task at `step` (default: the workflow's start step). Not an arrival.

        :param parent: the task this one is a subtask of (CLI.md `task create --parent`):
            the parent gets on_children_completed once all its non-archived children are at
            a terminal step.

        :param repository: a git repository for this task alone (over its workflow's): its
            agents work in a worktree of it (`core.services.worktrees`), from `base_branch`.
        """
        from core import wip
        from core.services import worktrees

        self._require_writer()
        if not title.strip():
            raise LanewayError("task title: must not be empty")
        require_text(title, "task title", t.column_length(TASKS.c.title))
        require_text(description, "task description")
        wf = self._workflows().get(workflow)
        target = self._workflows().step(wf, step) if step else wf.start_step
        if target is None:
            raise LanewayError(f"workflow {wf.name!r} has no steps")
        if repository:
            repository, base_branch = worktrees.checked(repository, base_branch)
        elif base_branch:
            repository, base_branch = worktrees.checked(wf.repository, base_branch)
        parent_id = self.get(parent).id if parent is not None else None
        task_id = ids.new_id()
        values = {
            "id": task_id,
            "parent_id": parent_id,
            "workspace_id": wf.workspace_id,
            "title": title,
            "description": description,
            "project_id": project,
            "priority": priority,
            "repository": repository,
            "base_branch": base_branch,
        }
        with self.peers.store.transaction() as uow:
            wip.place_new_task(uow, values, wf, target)
        return self.get(task_id)

    def get(self, ref: str) -> Task:
        """A task by its id, a unique suffix of 6+ characters of it, or its exact title when
        one task has it (CLI.md)."""
        return find_task(self.peers.store, self.peers.repository, ref)

    def list(
        self,
        *,
        workflow: str | None = None,
        step: str | None = None,
        state: str | None = None,
        search: str | None = None,
    ) -> list[Task]:
        """Tasks, oldest first; of one workflow, and of one step of it (a step by name needs
        its workflow; by id it does not); in one state; whose title or description contains
        `search` (case-insensitive). The filters combine."""
        query = sa.select(TASKS).order_by(TASKS.c.created_at, TASKS.c.id)
        if state is not None:
            wanted = state.strip().upper()
            if wanted not in TASK_STATES:
                raise LanewayError(f"task state {state!r}: must be one of {', '.join(TASK_STATES)}")
            query = query.where(TASKS.c.state == wanted)
        if search:
            check_search(search)
            query = query.where(
                sa.or_(
                    TASKS.c.title.icontains(search, autoescape=True),
                    TASKS.c.description.icontains(search, autoescape=True),
                )
            )
        wf = self._workflows().get(workflow) if workflow is not None else None
        if wf is not None:
            query = query.where(TASKS.c.workflow_id == wf.id)
        if step is not None:
            query = query.where(TASKS.c.workflow_step_id.in_(self._step_ids(wf, step)))
        with self.peers.store.read() as conn:
            return [rows.task(r) for r in conn.execute(query).mappings()]

    def _step_ids(self, wf: Workflow | None, ref: str) -> builtins.list[str]:
        """The steps `task list --step` means: of `wf` by id or name; with no workflow, the
        step with that id, else every workflow's step of that name (any case)."""
        if wf is not None:
            return [self._step(wf, ref).id]
        try:
            return [self._workflows().step_by_id(ref)[1].id]
        except NotFound:
            pass
        named = [
            s.id
            for w in self._workflows().list()
            for s in w.steps
            if s.name.casefold() == ref.casefold()
        ]
        if not named:
            raise NotFound(f"no step {ref!r} in any workflow")
        return named

    def children(self, ref: str) -> builtins.list[Task]:
        """The task's subtasks (archived ones too), oldest first."""
        task = self.get(ref)
        with self.peers.store.read() as conn:
            return [
                rows.task(r)
                for r in conn.execute(
                    sa.select(TASKS)
                    .where(TASKS.c.parent_id == task.id)
                    .order_by(TASKS.c.created_at, TASKS.c.id)
                ).mappings()
            ]

    def _workflow_of(self, task: Task) -> Workflow:
        if task.workflow_id is None:
            raise LanewayError(f"task {task.id} is not in a workflow")
        if task.archived_at is not None:
            raise LanewayError(f"task {task.id} is archived")
        return self._workflows().by_id(task.workflow_id)

    def _placed(self, ref: str) -> tuple[Task, Workflow]:
        task = self.get(ref)
        if task.workflow_id is None:
            raise LanewayError(f"task {task.id} is not in a workflow")
        if task.archived_at is not None:
            raise LanewayError(f"task {task.id} is archived")
        return task, self._workflows().by_id(task.workflow_id)

    def _step(self, wf: Workflow, ref: str) -> Step:
        return self._workflows().step(wf, ref)

    # -- routes that change the step ------------------------------------------------------------

    def move(self, ref: str, step: str) -> Task:
        """Manual move (entry path E2)."""
        return self.manual_move(ref, step).task

    def manual_move(self, ref: str, step: str) -> Change:
        """`move`, returning what it did: the task as moved, the step it left, whether it
        changed or was queued (the command line's line, from the move's own read)."""
        from core import arrival

        self._require_writer()

        def target(task: Task) -> str:
            chosen = self._step(self._workflow_of(task), step)
            if not chosen.allow_manual_move:
                raise LanewayError(f"step {chosen.name!r} does not allow manual moves")
            return chosen.id

        try:
            # an id, as nearly every caller gives: the move's own read is the only one
            change = arrival.move(self.peers.arrivals, ref, target, path="E2", label="manual")
        except NotFound:
            with self.peers.store.read() as conn:
                task_id = resolve_task(conn, TASKS, ref)  # NotFound naming the rule if none
            if task_id == ref:
                raise  # the task exists: what was not found is the step
            change = arrival.move(self.peers.arrivals, task_id, target, path="E2", label="manual")
        self._deliver_after(change.task)
        return change

    def _deliver_after(self, task: Task) -> None:
        """A move that brought a task to its terminal step may have queued its parent's or
        the tasks it blocked triggers (`core.outbox`): delivered now, in this process, rather
        than at the next scheduler pass of a worker or serve."""
        if task.state == "COMPLETED" and (task.parent_id is not None or self._blocks(task.id)):
            self._triggers().drain()

    def _blocks(self, task_id: str) -> bool:
        with self.peers.store.read() as conn:
            return (
                conn.execute(
                    sa.select(t.task_blockers.c.task_id)
                    .where(t.task_blockers.c.blocker_id == task_id)
                    .limit(1)
                ).first()
                is not None
            )

    def update(
        self,
        ref: str,
        *,
        step: str | None = None,
        title: str | None = None,
        description: str | None = None,
    ) -> Task:
        """Generic update: a new title or description (one `task.updated` event naming the
        fields that changed), and a step (entry path E5) when one is given."""
        from core import arrival

        self._require_writer()
        task, wf = self._placed(ref)
        values: dict[str, str] = {}
        if title is not None:
            if not title.strip():
                raise LanewayError(f"task {task.id} title: must not be empty")
            require_text(title, "task title", t.column_length(TASKS.c.title))
            if title != task.title:
                values["title"] = title
        if description is not None:
            require_text(description, "task description")
            if description != task.description:
                values["description"] = description
        if values:
            with self.peers.store.transaction() as uow:
                uow.conn.execute(
                    sa.update(TASKS)
                    .where(TASKS.c.id == task.id)
                    .values(**values, updated_at=ids.now())
                )
                events.record(
                    uow,
                    "task.updated",
                    task.id,
                    workflow_id=task.workflow_id,
                    fields=sorted(values),
                )
        if step is not None:
            target = self._step(wf, step)
            change = arrival.move(
                self.peers.arrivals, task.id, target.id, path="E5", label="task_update"
            )
            self._deliver_after(change.task)
        return self.get(task.id)

    def start(self, ref: str, *, step: str | None = None) -> Task:
        """Task start (entry path E5): to `step`, or the start step when none is given."""
        from core import arrival

        self._require_writer()
        task, wf = self._placed(ref)
        target = self._step(wf, step) if step else wf.start_step
        assert target is not None
        refuse_blocked(self._blockers().unfinished(task.id), task, "started")
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.update(TASKS)
                .where(TASKS.c.id == task.id, TASKS.c.state.in_(("TODO", "CREATED")))
                .values(state="IN_PROGRESS", updated_at=ids.now())
            )
        arrival.move(self.peers.arrivals, task.id, target.id, path="E5", label="task_update")
        started = self.get(task.id)
        if started.workflow_step_id and self._sessions().live(started.id) is None:
            agent = self._runs().primary_agent(started, started.workflow_step_id)
            if agent is not None:
                self._prepare_first_turn(started, wf, agent)
                self._runs().assign(started, started.workflow_step_id, agent)
            else:
                logger.bind(task_id=started.id, step_id=started.workflow_step_id).warning(
                    "task started but no agent works it: the step has no runner seat and "
                    "neither it nor its workflow names an agent profile; no run queued"
                )
        return started

    def _prepare_first_turn(self, task: Task, wf: Workflow, agent: str) -> None:
        """A start that leaves its task without a session (no arrival: the task stood at the
        step already; or an arrival whose entry had no session for its session kinds) opens
        the agent's session and applies the step's session kinds to it, so the first turn is
        the one the step declares (plan mode, a mode, a model) whichever route started it."""
        from core import entry
        from core.services.sessions import agent_session

        step = wf.step(task.workflow_step_id or "")
        if step is None or not step.actions("on_enter"):
            return
        session = agent_session(self._sessions(), task.id, agent)
        entry.apply_session_kinds(self.peers.kernel, task, step, session)

    def switch_workflow(self, ref: str, *, workflow: str, step: str | None = None) -> Task:
        """Move the task into another workflow (E4), as the switch_workflow action would."""
        from core.structural import SWITCH_LABEL

        self._require_writer()
        task, _wf = self._placed(ref)
        try:
            self.enter_workflow(task.id, workflow=workflow, step=step, by_trigger=False)
        except LanewayError as exc:
            raise LanewayError(f"{SWITCH_LABEL}: {exc}") from None
        return self.get(task.id)

    def enter_workflow(
        self, task_id: str, *, workflow: str, step: str | None = None, by_trigger: bool = True
    ) -> None:
        """Entry path E4: into another workflow's step (default its start step). The effect
        of core's switch_workflow kind: a trigger's move, so counted by the runaway-loop limit
        of the workflow it enters and stopped by it (`by_trigger`; a person's switch is not)."""
        from core import arrival
        from core.structural import SWITCH_LABEL

        self._require_writer()
        wf = self._workflows().get(workflow)
        target = self._workflows().step(wf, step) if step else wf.start_step
        if target is None:
            raise LanewayError(f"workflow {wf.name!r} has no steps")
        arrival.move(
            self.peers.arrivals,
            task_id,
            target.id,
            path="E4",
            label=SWITCH_LABEL,
            by_trigger=by_trigger,
        )

    def restore_step(self, ref: str, step_id: str) -> Task:
        """Undo history: put the task back at a step without running any entry work."""
        from core import arrival

        self._require_writer()
        return arrival.restore_step(self.peers.arrivals, self.get(ref).id, step_id)

    def detach(self, ref: str) -> Task:
        from core import arrival

        self._require_writer()
        return arrival.detach(self.peers.arrivals, self.get(ref).id)

    def owner(self, task: Task) -> str | None:
        """The plugin that owns the task (Office for its tasks), or None: the host's own."""
        workspace = self._workspace().by_id(task.workspace_id)
        return self.peers.bundle.registry.hooks.task_ownership(task, workspace)

    def set_state(self, ref: str, state: str) -> None:
        """The task's state column (never its step)."""
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.update(TASKS).where(TASKS.c.id == ref).values(state=state, updated_at=ids.now())
            )

    def wait_after_failure(
        self,
        task_id: str,
        step_id: str | None,
        *,
        run_id: str | None = None,
        session_id: str | None = None,
        error: str = "",
    ) -> bool:
        """An agent failed and on_agent_error is done: when the task still stands at the
        step it failed at, in REVIEW, with no other run of it queued or running, it waits for
        a person (`task.needs_person`, reason `failure`). One conditional INSERT decides
        (core.store.waits); True when this call began the wait."""
        if step_id is None:
            return False
        runs = t.runs
        still = sa.and_(
            sa.select(TASKS.c.id)
            .where(
                TASKS.c.id == task_id,
                TASKS.c.workflow_step_id == step_id,
                TASKS.c.state == "REVIEW",
                TASKS.c.archived_at.is_(None),
            )
            .exists(),
            ~sa.select(runs.c.id)
            .where(
                runs.c.task_id == task_id,
                runs.c.status.in_(("queued", "claimed")),
                runs.c.id != (run_id or ""),
            )
            .exists(),
        )
        with self.peers.store.transaction() as uow:
            return waits.begin(
                uow,
                task_id,
                "failure",
                still,
                run_id=run_id,
                session_id=session_id,
                error=error[:500],
            )

    # -- lifecycle --------------------------------------------------------------------------------

    def archive(self, ref: str) -> Task:
        """Archive the task; its worktree's work is committed to its branch, the worktree
        removed (`core.services.worktrees.retire`)."""
        from core import arrival
        from core.services import worktrees

        self._require_writer()
        task = self.get(ref)
        # its agents stop first: an archived card has no one working on it
        self._runs().cancel_task(task.id, reason="task_archived")
        with self.peers.store.transaction() as uow:
            archived = uow.conn.execute(
                sa.update(TASKS)
                .where(TASKS.c.id == task.id, TASKS.c.archived_at.is_(None))
                .values(archived_at=ids.now(), updated_at=ids.now())
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if archived == 1:
                events.record(uow, "task.archived", task.id, workflow_id=task.workflow_id)
                if task.parent_id is not None:
                    # the child left out of the set may have been the last one unfinished
                    outbox.note_children(uow, task.parent_id)
        if task.workflow_step_id and task.archived_at is None:
            arrival.promote(self.peers.arrivals, task.workflow_step_id)
        if archived == 1:
            worktrees.retire(self.peers.store, task, "archived", self.peers.cleanup_room)
            if task.parent_id is not None:
                self._triggers().drain()
        return self.get(task.id)

    def unarchive(self, ref: str) -> Task:
        """Put an archived task back on its board, at the step it was archived at. Not an
        arrival: no entry work runs and no agent is started (the page's Undo, `task start` to
        start one). It takes its place whatever the step's WIP limit: it held it before."""
        self._require_writer()
        task = self.get(ref)
        with self.peers.store.transaction() as uow:
            restored = uow.conn.execute(
                sa.update(TASKS)
                .where(TASKS.c.id == task.id, TASKS.c.archived_at.is_not(None))
                .values(archived_at=None, updated_at=ids.now())
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if restored == 1:
                events.record(
                    uow,
                    "task.unarchived",
                    task.id,
                    workflow_id=task.workflow_id,
                    step_id=task.workflow_step_id,
                )
        if restored != 1:
            raise LanewayError(f"task {task.id} is not archived")
        return self.get(task.id)

    def delete(self, ref: str) -> str:
        """Delete the task; its ledger, sessions, history and own seats go with it. Its
        worktree's work is committed to its branch first, and the branch kept."""
        from core import arrival
        from core.services import worktrees

        self._require_writer()
        task = self.get(ref)
        # its runs are cancelled first, so no agent goes on working for a task that is gone
        # (the runs rows outlive the task: their workers still read the cancel request)
        self._runs().cancel_task(task.id, reason="task_deleted")
        worktrees.retire(self.peers.store, task, "deleted", self.peers.cleanup_room)
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.delete(t.workflow_step_participants).where(
                    t.workflow_step_participants.c.task_id == task.id
                )
            )
            _forget_relations(uow, task.id)
            gone = uow.conn.execute(
                sa.delete(TASKS)
                .where(TASKS.c.id == task.id)
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if gone == 1:
                events.record(uow, "task.deleted", task.id, workflow_id=task.workflow_id)
        if task.workflow_step_id and task.archived_at is None:
            arrival.promote(self.peers.arrivals, task.workflow_step_id)
        return task.id


def refuse_blocked(blockers: builtins.list[Task], task: Task, what: str) -> None:
    """One line naming the first unfinished blocker, when there is one."""
    if not blockers:
        return
    first = blockers[0]
    more = f" and {len(blockers) - 1} more" if len(blockers) > 1 else ""
    raise Conflict(
        f"task {task.id} cannot be {what}: it is blocked by {first.id} ({first.title!r}, "
        f"{first.state}){more}; it can start once its blockers are finished "
        f"(or `task unblock {task.id} --by {first.id}`)"
    )


def _forget_relations(uow: UnitOfWork, task_id: str) -> None:
    """A task being deleted is no one's parent and no one's blocker any more (its
    `task_blockers` rows go by the foreign key's cascade; the copies on the rows of the
    tasks it blocked are rewritten here)."""
    from core.services.blockers import write_blocked_by

    uow.conn.execute(sa.update(TASKS).where(TASKS.c.parent_id == task_id).values(parent_id=None))
    blocked = [
        str(r)
        for r in uow.conn.execute(
            sa.select(t.task_blockers.c.task_id).where(t.task_blockers.c.blocker_id == task_id)
        ).scalars()
    ]
    uow.conn.execute(sa.delete(t.task_blockers).where(t.task_blockers.c.blocker_id == task_id))
    for other in blocked:
        write_blocked_by(uow, other)
