from __future__ import annotations

import builtins
import functools
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from core import ids
from core.errors import LanewayError, NotFound
from core.model import PARTICIPANT_ROLES, Participant, Step, Task, Workflow
from core.services.base import Lazy, Service
from core.store import prepared, rows
from core.store import tables as t

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.profiles import ProfileService
    from core.services.tasks import TaskService
    from core.services.workflows import WorkflowService
    from core.store.database import Store

DECIDING_ROLES = frozenset({"reviewer", "approver"})


@functools.cache
def _seats() -> sa.Select[Any]:
    """Template seats ('') and the task's own seats at a step, in the merged listing's order
    (built when first asked: a manual move reads no seat)."""
    p = t.workflow_step_participants
    return (
        sa.select(p)
        .where(
            p.c.step_id == sa.bindparam("step_id"),
            sa.or_(p.c.task_id == "", p.c.task_id == sa.bindparam("task_id")),
        )
        .order_by(p.c.role, p.c.position, p.c.id)
    )


class ParticipantService(Service):
    """Seats at a step: template seats (every task) and per-task seats (one task)."""

    def __init__(
        self,
        peers: Peers,
        *,
        profiles: Lazy[ProfileService],
        tasks: Lazy[TaskService],
        workflows: Lazy[WorkflowService],
    ) -> None:
        super().__init__(peers)
        self._profiles = profiles
        self._tasks = tasks
        self._workflows = workflows

    def _resolve(
        self, step: str, task: str | None, workflow: str | None
    ) -> tuple[Workflow, Step, Task | None]:
        if task is not None:
            task_row = self._tasks().get(task)
            if task_row.workflow_id is None:
                raise LanewayError(f"task {task_row.id} is not in a workflow")
            wf = self._workflows().by_id(task_row.workflow_id)
            return wf, self._workflows().step(wf, step), task_row
        if workflow is None:
            raise LanewayError("participant: give --task or --workflow to say whose step it is")
        wf = self._workflows().get(workflow)
        return wf, self._workflows().step(wf, step), None

    def add(
        self,
        *,
        step: str,
        role: str,
        profile: str,
        task: str | None = None,
        workflow: str | None = None,
        decision_required: bool | None = None,
        position: int = 0,
    ) -> Participant:
        """Add a seat. A duplicate (role, profile) seat is accepted; readers de-duplicate."""
        self._require_writer()
        if role not in PARTICIPANT_ROLES:
            raise LanewayError(
                f"participant role {role!r}: must be one of {', '.join(PARTICIPANT_ROLES)}"
            )
        _wf, step_row, task_row = self._resolve(step, task, workflow)
        agent = self._profiles().get(profile)
        required = role in DECIDING_ROLES if decision_required is None else decision_required
        seat = Participant(
            id=ids.new_id(),
            step_id=step_row.id,
            task_id=task_row.id if task_row else "",
            role=role,
            agent_profile_id=agent.id,
            decision_required=required,
            position=position,
        )
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.workflow_step_participants).values(
                    id=seat.id,
                    step_id=seat.step_id,
                    task_id=seat.task_id,
                    role=seat.role,
                    agent_profile_id=seat.agent_profile_id,
                    decision_required=seat.decision_required,
                    position=seat.position,
                    created_at=ids.now(),
                )
            )
        return seat

    def list(
        self, *, step: str, task: str | None = None, workflow: str | None = None
    ) -> builtins.list[Participant]:
        _wf, step_row, task_row = self._resolve(step, task, workflow)
        with self.peers.store.read() as conn:
            return merged_seats(conn, step_row.id, task_row.id if task_row else None)

    def seats_at(self, task_id: str, step_id: str) -> builtins.list[Participant]:
        """The merged seats of a task at a step (approvers before reviewers: role order)."""
        with self.peers.store.read() as conn:
            return merged_seats(conn, step_id, task_id)

    def fan_out_seats(self, task_id: str, step_id: str, role: str) -> builtins.list[Participant]:
        """The fan-out's participant set, read once in one query: the merged seats of `role`,
        de-duplicated on (role, agent) keeping the first in (role, position, id) order."""
        with self.peers.store.read() as conn:
            seats = merged_seats(conn, step_id, task_id)
        seen: set[tuple[str, str]] = set()
        chosen = []
        for seat in seats:
            key = (seat.role, seat.agent_profile_id)
            if seat.role == role and key not in seen:
                seen.add(key)
                chosen.append(seat)
        return chosen

    def ensure_task_seat(
        self, task_id: str, step_id: str, role: str, agent_profile_id: str, required: bool
    ) -> Participant:
        """The task's own seat (role, agent) at the step: found, or created once."""
        p = t.workflow_step_participants
        with self.peers.store.transaction() as uow:
            row = (
                uow.conn.execute(
                    sa.select(p).where(
                        p.c.step_id == step_id,
                        p.c.task_id == task_id,
                        p.c.role == role,
                        p.c.agent_profile_id == agent_profile_id,
                    )
                )
                .mappings()
                .first()
            )
            if row is not None:
                return rows.participant(row)
            seat = Participant(ids.new_id(), step_id, task_id, role, agent_profile_id, required)
            uow.conn.execute(
                sa.insert(p).values(
                    id=seat.id,
                    step_id=step_id,
                    task_id=task_id,
                    role=role,
                    agent_profile_id=agent_profile_id,
                    decision_required=required,
                    position=0,
                    created_at=ids.now(),
                )
            )
            return seat

    def quorum_rows(self, task: Task, step: Step) -> builtins.list[Participant]:
        assert task.workflow_id is not None
        with self.peers.store.read() as conn:
            return quorum_rows(conn, task.id, task.workflow_id, step.id)

    def primary_agent(self, task: Task, step_id: str) -> str | None:
        """`primary_agent` (the module's function)."""
        return primary_agent(self.peers.store, self._workflows(), task, step_id)

    def remove(self, participant_id: str) -> str:
        """Remove one seat by its id (a duplicate seat too: each has its own). Verdicts it
        gave stay in the decision history; a quorum counts the seats there are."""
        self._require_writer()
        seats = t.workflow_step_participants
        with self.peers.store.transaction() as uow:
            gone = uow.conn.execute(
                sa.delete(seats)
                .where(seats.c.id == participant_id)
                .execution_options(preserve_rowcount=True)
            ).rowcount
        if gone != 1:
            raise NotFound(f"no participant {participant_id!r}")
        return participant_id

    def get(self, participant_id: str) -> Participant:
        with self.peers.store.read() as conn:
            row = (
                conn.execute(
                    sa.select(t.workflow_step_participants).where(
                        t.workflow_step_participants.c.id == participant_id
                    )
                )
                .mappings()
                .first()
            )
        if row is None:
            raise NotFound(f"no participant {participant_id!r}")
        return rows.participant(row)


def merged_seats(
    conn: sa.Connection, step_id: str, task_id: str | None
) -> builtins.list[Participant]:
    """Template seats plus the task's own seats at the step, by role, position, id.

    A template seat is dropped when the task has its own seat with the same role and agent.
    """
    result = prepared.execute(conn, _seats(), {"step_id": step_id, "task_id": task_id or ""})
    seats = [rows.participant(r) for r in result.mappings()]
    own = {(s.role, s.agent_profile_id) for s in seats if s.task_id}
    return [s for s in seats if s.task_id or (s.role, s.agent_profile_id) not in own]


def quorum_rows(
    conn: sa.Connection, task_id: str, workflow_id: str, step_id: str
) -> builtins.list[Participant]:
    """The raw material of a quorum slate: the task's own seats at any step of its workflow,
    plus the template seats at the step itself."""
    p = t.workflow_step_participants
    steps = sa.select(t.workflow_steps.c.id).where(t.workflow_steps.c.workflow_id == workflow_id)
    result = conn.execute(
        sa.select(p)
        .where(
            sa.or_(
                sa.and_(p.c.task_id == task_id, p.c.step_id.in_(steps)),
                sa.and_(p.c.task_id == "", p.c.step_id == step_id),
            )
        )
        .order_by(p.c.id)
    ).mappings()
    return [rows.participant(r) for r in result]


def primary_agent(store: Store, workflows: WorkflowService, task: Task, step_id: str) -> str | None:
    """The runner seat at the step, else the step's agent, else the workflow's, else the
    task's most recent runner seat anywhere. Asked on every arrival at a step that starts its
    agent itself, so it lives with the seats, not the run queue: a move into such a step with
    nobody to start imports no run machinery."""
    seats = t.workflow_step_participants
    with store.read() as conn:
        runner = conn.execute(
            sa.select(seats.c.agent_profile_id)
            .where(
                seats.c.step_id == step_id,
                seats.c.task_id.in_(("", task.id)),
                seats.c.role == "runner",
            )
            .order_by(seats.c.position, seats.c.id)
            .limit(1)
        ).scalar()
        if runner:
            return str(runner)
        workflow, step = workflows.step_by_id(step_id)
        if step.agent_profile_id:
            return step.agent_profile_id
        if workflow.agent_profile_id:
            return workflow.agent_profile_id
        latest = conn.execute(
            sa.select(seats.c.agent_profile_id)
            .where(seats.c.task_id == task.id, seats.c.role == "runner")
            .order_by(seats.c.created_at.desc(), seats.c.id.desc())
            .limit(1)
        ).scalar()
    return str(latest) if latest else None
