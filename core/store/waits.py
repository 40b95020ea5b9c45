"""Why a task waits for a person, beyond a pending permission (issue 42 item 2): `failure`
(an agent failed and on_agent_error left the task for a person: still at its step, in REVIEW,
no run of it queued; or a run gave up after its worker died each attempt) and `blocked` (a
task blocks it that has not finished).

A wait is a row of `person_waits`, one per (task, reason). `begin` inserts it by one
conditional INSERT (the condition and the primary key in one statement: its row count
decides, so of any number of processes one writes `task.needs_person`); `end` deletes it
and writes `task.needs_person_ended` with the same fields. A move, a queued run, an archive or
a delete of the task ends its failure wait in the same transaction (`core.store.events.flush`
asks `ENDED_BY`), so no caller has to remember to.

Not written: `verdict`. A seat is always an agent profile's (`workflow_step_participants.
agent_profile_id`), so the model has no seat that waits on a person's verdict: a person's
verdict is recorded with `decision record` for an agent's seat, and nothing awaits it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa

from core import ids
from core.store import events
from core.store import tables as t
from core.store.dialect import upsert_into

if TYPE_CHECKING:
    from core.store.database import UnitOfWork

W = t.person_waits
REASONS: Final = ("failure", "blocked")
TERMINAL_STATES: Final = ("CANCELLED", "COMPLETED", "FAILED")
"""A blocker in one of these states has finished (core.outbox's, which sits above the store)."""


def unfinished_blockers(task_id: str) -> sa.Exists:
    """Whether a task blocking `task_id` has not finished (one statement's condition)."""
    blockers, tasks = t.task_blockers, t.tasks
    return (
        sa.select(blockers.c.blocker_id)
        .join(tasks, tasks.c.id == blockers.c.blocker_id)
        .where(blockers.c.task_id == task_id, tasks.c.state.not_in(TERMINAL_STATES))
        .exists()
    )


def begin(
    uow: UnitOfWork,
    task_id: str,
    reason: str,
    when: sa.ColumnElement[bool] | None = None,
    **fields: Any,
) -> bool:
    """The task starts waiting for a person for `reason` (when `when` holds, in this
    statement): True, and `task.needs_person` written, when this call began it."""
    data = json.dumps(fields, separators=(",", ":"), default=str)
    chosen = sa.select(
        sa.literal(task_id, sa.String),
        sa.literal(reason, sa.String),
        sa.literal(data, sa.Text),
        sa.literal(ids.now(), sa.String),
    ).where(when if when is not None else sa.true())
    statement = (
        upsert_into(uow.conn.dialect.name, W)
        .from_select(["task_id", "reason", "data", "created_at"], chosen)
        .on_conflict_do_nothing()
        .execution_options(preserve_rowcount=True)
    )
    if uow.conn.execute(statement).rowcount != 1:
        return False
    events.record(uow, "task.needs_person", task_id, reason=reason, **fields)
    return True


def end(
    uow: UnitOfWork, task_id: str, reason: str, when: sa.ColumnElement[bool] | None = None
) -> bool:
    """The task's wait for `reason` is over (when `when` holds, in this statement): True, and
    `task.needs_person_ended` written, when this call ended it."""
    gone = uow.conn.execute(
        sa.delete(W)
        .where(W.c.task_id == task_id, W.c.reason == reason)
        .where(when if when is not None else sa.true())
        .returning(W.c.data)
    ).first()
    if gone is None:
        return False
    events.record(uow, "task.needs_person_ended", task_id, reason=reason, **json.loads(gone[0]))
    return True
