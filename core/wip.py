"""WIP placement: whether a step has room, where a new task goes, who is admitted next.

A step's `wip_limit` bounds its admitted tasks. `place_new_task` puts a created task at its
step, in the step's feeder, or queued; `next_candidate` says who a vacated step admits next
(queued tasks first, then feeder tasks for it). The admission itself is the transition's
(`core.transition.admit_next`); the promotion loop is the arrival layer's.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from core import ids
from core.errors import Conflict
from core.model import WORKING_STATES, Step, Task, Workflow
from core.store import events, rows
from core.store import tables as t
from core.store.database import UnitOfWork

TASKS = t.tasks
PRIORITY_RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3}

# Admissions into a WIP-limited step are ordered by its row, so two processes cannot both
# take its last slot.
_LOCK_STEP = (
    sa.select(t.workflow_steps.c.id)
    .where(t.workflow_steps.c.id == sa.bindparam("step_id"))
    .with_for_update(key_share=True)
)


def admitted_count(conn: sa.Connection, step_id: str, exclude_task: str | None) -> int:
    query = sa.select(sa.func.count()).where(
        TASKS.c.workflow_step_id == step_id,
        TASKS.c.wip_admitted.is_(True),
        TASKS.c.archived_at.is_(None),
        TASKS.c.is_ephemeral.is_(False),
    )
    if exclude_task is not None:
        query = query.where(TASKS.c.id != exclude_task)
    return int(conn.execute(query).scalar_one())


def has_room(conn: sa.Connection, step: Step, task_id: str | None, ephemeral: bool) -> bool:
    """Whether `step` can admit one more task (locking the step row when it is limited)."""
    if ephemeral or step.wip_limit <= 0:
        return True
    conn.execute(_LOCK_STEP, {"step_id": step.id})
    return admitted_count(conn, step.id, task_id) < step.wip_limit


def place_new_task(uow: UnitOfWork, values: dict[str, Any], workflow: Workflow, step: Step) -> None:
    """Insert a new task at `step`. Creation is never an arrival.

    A full step with a feeder places the task in the feeder, tagged for `step`; a full step
    without one stores it queued in place; a full feeder too refuses the creation.
    """
    stamp = ids.now()
    row = dict(values, workflow_id=workflow.id, created_at=stamp, updated_at=stamp)
    ephemeral = bool(values.get("is_ephemeral"))
    if has_room(uow.conn, step, None, ephemeral):
        row.update(workflow_step_id=step.id, wip_admitted=True)
    elif step.pull_from_step_id:
        feeder = workflow.step(step.pull_from_step_id)
        if feeder is None or not has_room(uow.conn, feeder, None, ephemeral):
            raise Conflict(
                f"step {step.name!r} is full and its feeder step cannot take the task either"
            )
        row.update(workflow_step_id=feeder.id, wip_admitted=True, queued_for_step_id=step.id)
    else:
        row.update(
            workflow_step_id=step.id,
            wip_admitted=False,
            queued_for_step_id=step.id,
            queued_at=stamp,
        )
    uow.conn.execute(sa.insert(TASKS).values(**row))
    events.record(
        uow,
        "task.created",
        row["id"],
        workflow_id=workflow.id,
        step_id=row["workflow_step_id"],
        queued=not row["wip_admitted"],
    )


def _order_key(task: Task) -> tuple[int, int, str, str, str]:
    return (
        task.position,
        PRIORITY_RANK.get(task.priority, 4),
        task.queued_at or "",
        task.created_at,
        task.id,
    )


def next_candidate(conn: sa.Connection, workflow: Workflow, step: Step) -> Task | None:
    """Who is admitted next: tasks queued at the step, then feeder tasks for it (a feeder
    task whose agent is at work stays where it is)."""
    queued = [
        rows.task(r)
        for r in conn.execute(
            sa.select(TASKS).where(
                TASKS.c.workflow_step_id == step.id,
                TASKS.c.wip_admitted.is_(False),
                TASKS.c.archived_at.is_(None),
            )
        ).mappings()
    ]
    if queued:
        return min(queued, key=_order_key)
    if not step.pull_from_step_id:
        return None
    s = t.task_sessions
    busy = sa.select(s.c.task_id).where(s.c.state.in_(tuple(WORKING_STATES)))
    feeder = [
        rows.task(r)
        for r in conn.execute(
            sa.select(TASKS).where(
                TASKS.c.workflow_step_id == step.pull_from_step_id,
                TASKS.c.wip_admitted.is_(True),
                TASKS.c.archived_at.is_(None),
                sa.or_(
                    TASKS.c.queued_for_step_id.is_(None),
                    TASKS.c.queued_for_step_id == step.id,
                ),
                TASKS.c.id.not_in(busy),
            )
        ).mappings()
    ]
    return min(feeder, key=_order_key) if feeder else None
