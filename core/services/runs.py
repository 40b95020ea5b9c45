from __future__ import annotations

import builtins
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa

from core import ids, runs
from core.errors import Conflict, LanewayError, NotFound
from core.logs import logger
from core.model import Run, Task
from core.services import participants
from core.services.base import Lazy, Service
from core.services.refs import find_task, resolve_id
from core.store import rows
from core.store import tables as t

if TYPE_CHECKING:
    from core.services.blockers import BlockerService
    from core.services.peers import Peers
    from core.services.profiles import ProfileService
    from core.services.workflows import WorkflowService

R = t.runs

USAGE_KEYS: Final = ("cost_usd", "input_tokens", "output_tokens")
"""What a run's `usage` adds up (CLI.md: what agents reported they spent)."""


def _usage_amount(run_id: str, key: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LanewayError(f"run {run_id}, usage {key}: {value!r} is not a number")
    if value < 0:
        raise LanewayError(f"run {run_id}, usage {key}: must not be negative")
    return value if key == "cost_usd" else int(value)


class RunService(Service):
    """The runs queue: agent work requested by workflow actions."""

    def __init__(
        self,
        peers: Peers,
        *,
        blockers: Lazy[BlockerService],
        profiles: Lazy[ProfileService],
        workflows: Lazy[WorkflowService],
    ) -> None:
        super().__init__(peers)
        self._blockers = blockers
        self._profiles = profiles
        self._workflows = workflows

    def enqueue(self, request: runs.RunRequest) -> runs.Enqueued:
        self._require_writer()
        with self.peers.store.transaction() as uow:
            return runs.enqueue(uow, request)

    def get(self, run_id: str) -> Run | None:
        with self.peers.store.read() as conn:
            row = conn.execute(sa.select(R).where(R.c.id == run_id)).mappings().first()
        return rows.run(row) if row is not None else None

    def find(self, ref: str) -> Run:
        """A run by its id or a unique suffix of it (at least 6 characters, CLI.md)."""
        with self.peers.store.read() as conn:
            run_id = resolve_id(conn, R.c.id, ref, "run")
        found = self.get(run_id)
        if found is None:  # deleted between the two reads
            raise NotFound(f"no run {ref!r}")
        return found

    def cancel(self, ref: str, reason: str = "user") -> Run:
        """Stop a run (CLI.md `runs cancel`): a queued run is cancelled at once; a claimed one
        gets a cancel request its worker, in whatever process, acts on within a second (the
        turn stopped, the run `cancelled`, no on_agent_error). Anything else is an error."""
        self._require_writer()
        run = self.find(ref)
        with self.peers.store.transaction() as uow:
            done = runs.cancel(uow, run.id, reason)
        if done.outcome == "none":
            raise Conflict(
                f"run {run.id} is {done.status}: only a queued or running run can be cancelled"
            )
        return self.find(run.id)

    def cancel_task(self, task_id: str, reason: str = "user") -> builtins.list[str]:
        """Cancel every queued and running run of the task (CLI.md `task cancel`); the ids of
        the runs cancelled or asked to stop, oldest first."""
        self._require_writer()
        with self.peers.store.read() as conn:
            open_runs = [
                str(r)
                for r in conn.execute(
                    sa.select(R.c.id)
                    .where(R.c.task_id == task_id, R.c.status.in_(("queued", runs.CLAIMED)))
                    .order_by(R.c.requested_at, R.c.id)
                ).scalars()
            ]
        cancelled = []
        with self.peers.store.transaction() as uow:
            for run_id in open_runs:
                if runs.cancel(uow, run_id, reason).outcome != "none":
                    cancelled.append(run_id)
        return cancelled

    def retry(self, ref: str) -> Run:
        """Queue a failed, dead or cancelled run again as a new attempt (CLI.md `runs retry`):
        a new run, `retry_of` the old one, which keeps its status and transcript."""
        self._require_writer()
        run = self.find(ref)
        if run.status not in runs.RETRYABLE:
            raise Conflict(
                f"run {run.id} is {run.status}: only a failed, dead or cancelled run can be retried"
            )
        with self.peers.store.transaction() as uow:
            new_id = runs.retry(uow, run)
        if new_id is None:
            raise Conflict(self._not_retried(self.find(run.id)))
        return self.find(new_id)

    def _not_retried(self, run: Run) -> str:
        """Why `runs.retry` queued nothing, in one line (read after its statement decided)."""
        with self.peers.store.read() as conn:
            retried_by = conn.execute(sa.select(R.c.retried_by).where(R.c.id == run.id)).scalar()
        if retried_by is not None:
            return f"run {run.id} was already retried: run {retried_by} is its retry"
        if run.status not in runs.RETRYABLE:
            return (
                f"run {run.id} is {run.status}: only a failed, dead or cancelled run can be retried"
            )
        try:
            step = repr(self.peers.repository.step(run.workflow_step_id or "")[1].name)
        except LanewayError:
            step = str(run.workflow_step_id)
        return (
            f"run {run.id} was for step {step}, which its task has left: a retry would be "
            "cancelled unrun (move the task back, or start it, to queue a new turn)"
        )

    def record_usage(self, run_id: str, usage: Mapping[str, Any]) -> None:
        """Add what the agent reported it spent (`cost_usd`, `input_tokens`,
        `output_tokens`; other keys are ignored) into the run's `usage`. The run's row is
        locked for the read and the write, so reports from two threads or processes both
        count."""
        amounts = {
            key: _usage_amount(run_id, key, usage[key])
            for key in USAGE_KEYS
            if usage.get(key) is not None
        }
        if not amounts:
            return
        with self.peers.store.transaction() as uow:
            found = uow.conn.execute(
                sa.select(R.c.id, R.c.usage).where(R.c.id == run_id).with_for_update(key_share=True)
            ).first()
            if found is None:
                raise NotFound(f"no run {run_id!r}")
            total: dict[str, Any] = {"cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0}
            total.update(json.loads(found.usage) if found.usage else {})
            for key, amount in amounts.items():
                total[key] = total.get(key, 0) + amount
            uow.conn.execute(sa.update(R).where(R.c.id == run_id).values(usage=rows.dumps(total)))
            if "cost_usd" in amounts:
                # a threshold this report crossed: its alert commits with the report
                # (core.services.budgets), delivered by the next scheduler pass
                from core.services import budgets

                budgets.check_run(uow, run_id)

    def list(self, *, task: str | None = None, status: str | None = None) -> builtins.list[Run]:
        query = sa.select(R).order_by(R.c.requested_at, R.c.id)
        if task is not None:
            # read as `TaskService.get` reads it, without naming the task service (which
            # names this one)
            found = find_task(self.peers.store, self.peers.repository, task)
            query = query.where(R.c.task_id == found.id)
        if status is not None:
            if status not in runs.RUN_STATUSES:
                raise LanewayError(
                    f"run status {status!r}: expected one of {', '.join(runs.RUN_STATUSES)}"
                )
            query = query.where(R.c.status == status)
        with self.peers.store.read() as conn:
            return [rows.run(r) for r in conn.execute(query).mappings()]

    def waits_for_host(self, found: Sequence[Run]) -> dict[str, str]:
        """Queued runs among `found` that only a worker on one host may take (their task's
        worktree lives there and its branch does not travel through a remote: core.runs claims
        them only there): run id -> that host."""
        task_ids = {r.task_id for r in found if r.status == "queued" and r.task_id is not None}
        if not task_ids:
            return {}
        with self.peers.store.read() as conn:
            records = conn.execute(
                sa.select(t.tasks.c.id, t.tasks.c.workspace, t.workflows.c.remote)
                .select_from(
                    t.tasks.outerjoin(t.workflows, t.workflows.c.id == t.tasks.c.workflow_id)
                )
                .where(t.tasks.c.id.in_(sorted(task_ids)), t.tasks.c.workspace.is_not(None))
            ).all()
        hosts = {task_id: runs.pinned_host(text, remote) for task_id, text, remote in records}
        return {
            r.id: str(hosts[r.task_id])
            for r in found
            if r.status == "queued" and r.task_id in hosts and hosts[r.task_id]
        }

    def waits_for_run(self, found: Sequence[Run]) -> dict[str, str]:
        """Queued runs among `found` whose session runs another run now (its task's agent has
        a claimed run: core.runs claims them only once it ends): run id -> that run's id."""
        queued = {
            (r.task_id, r.agent_profile_id) for r in found if r.status == "queued" and r.task_id
        }
        if not queued:
            return {}
        with self.peers.store.read() as conn:
            busy = conn.execute(
                sa.select(R.c.task_id, R.c.agent_profile_id, R.c.id).where(
                    R.c.status == runs.CLAIMED,
                    R.c.task_id.in_(sorted({task for task, _agent in queued})),
                )
            ).all()
        running = {(task, agent): str(run_id) for task, agent, run_id in busy}
        return {
            r.id: running[(r.task_id, r.agent_profile_id)]
            for r in found
            if r.status == "queued" and (r.task_id, r.agent_profile_id) in running
        }

    def resolve_target(self, target: str, task: Task, step_id: str) -> builtins.list[str]:
        """The agent profile ids a queue_run target names (the reference's resolution)."""
        if target.startswith("agent_profile_id:"):
            agent = target.removeprefix("agent_profile_id:")
            if not agent:
                raise LanewayError("queue_run target agent_profile_id: names no agent")
            return [agent]
        if target.startswith("participant_role:"):
            role = target.removeprefix("participant_role:")
            with self.peers.store.read() as conn:
                seats = [
                    s for s in participants.merged_seats(conn, step_id, task.id) if s.role == role
                ]
            if not seats:
                raise LanewayError(f"queue_run target {target}: no participant has that role")
            return list(dict.fromkeys(s.agent_profile_id for s in seats))
        if target == "workspace.ceo_agent":
            ceo = self._profiles().first_with_role("ceo")
            if ceo is None:
                raise LanewayError("queue_run target workspace.ceo_agent: no profile has role ceo")
            return [ceo.id]
        if target == "primary":
            primary = self.primary_agent(task, step_id)
            if primary is None:
                raise LanewayError("queue_run target primary: the task has no runner or agent")
            return [primary]
        raise LanewayError(f"queue_run target {target!r} is not supported")

    def primary_agent(self, task: Task, step_id: str) -> str | None:
        """`core.services.participants.primary_agent` (the plugin API's
        `host.runs.primary_agent`)."""
        return participants.primary_agent(self.peers.store, self._workflows(), task, step_id)

    def assign(self, task: Task, step_id: str, agent_profile_id: str) -> runs.Enqueued | None:
        """Queue the agent's turn on the task at the step (reason `task_assigned`); None, and
        nothing queued, while the task is blocked by an unfinished task (it starts once they
        are finished: `task start`, or the workflow's on_blocker_resolved)."""
        blockers = self._blockers().unfinished(task.id)
        if blockers:
            logger.bind(
                task_id=task.id,
                step_id=step_id,
                agent_profile_id=agent_profile_id,
                blocked_by=[b.id for b in blockers],
            ).info("agent not started: the task is blocked by an unfinished task")
            return None
        return self.enqueue(
            runs.RunRequest(
                agent_profile_id=agent_profile_id,
                task_id=task.id,
                workflow_step_id=step_id,
                reason="task_assigned",
            )
        )

    def start_review(self, task_id: str, step_id: str, agent_profile_id: str | None) -> str:
        """Record a code-review pass for the task at the step (`task_review_runs`)."""
        review_id = ids.new_id()
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.task_review_runs).values(
                    id=review_id,
                    task_id=task_id,
                    workflow_step_id=step_id,
                    trigger="workflow_step",
                    status="started",
                    created_at=ids.now(),
                )
            )
        return review_id
