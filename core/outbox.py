"""The trigger outbox: a trigger whose cause has committed, waiting to be delivered.

A subtask reaching its terminal step may complete its parent's set of children
(on_children_completed), and may be the last blocker of the tasks it blocks
(on_blocker_resolved); a run's reported cost may cross a budget's threshold (on_budget_alert);
a comment fires on_comment (`core.services.comments`). The cause's own transaction writes a row
here, keyed by the trigger's operation id (kandev-domain section 1), so a crash after the
cause's COMMIT loses nothing: the next delivery pass in any process
(`core.services.triggers.drain`, run by the scheduler of every `worker` and `serve`) finds the
row and delivers the trigger under that operation id, whose claim in `applied_operations` makes
a second delivery idempotent. The row is deleted once its operation is applied.

What is terminal, for a child or a blocker: its task state is COMPLETED (set by its arrival at
its workflow's terminal step), FAILED or CANCELLED (the reference's terminal task states).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs
import sqlalchemy as sa

from core import ids
from core.store import tables as t
from core.store import waits
from core.store.database import UnitOfWork

TASKS = t.tasks
_BY_AGENT: Final = "fired_by_agent"
"""Where a row keeps its `Pending.fired_by_agent`: beside the payload, in its JSON column."""
TERMINAL_STATES: Final = frozenset(waits.TERMINAL_STATES)

_PUT = sa.text(
    "INSERT INTO trigger_outbox (operation_id, task_id, trigger, payload, created_at) "
    "VALUES (:o_op, :o_task, :o_trigger, :o_payload, :o_at) "
    "ON CONFLICT (operation_id) DO NOTHING"
)


@attrs.frozen
class Pending:
    """One undelivered trigger."""

    operation_id: str
    task_id: str
    trigger: str
    payload: Mapping[str, Any]
    created_at: str
    fired_by_agent: str | None = None
    """The agent profile whose own act caused it (a comment its `comment` tool wrote): the
    delivery passes it on, so the trigger does not wake that agent."""


def put(
    uow: UnitOfWork,
    operation_id: str,
    task_id: str,
    trigger: str,
    payload: Mapping[str, Any],
    *,
    fired_by_agent: str | None = None,
) -> None:
    """Write a trigger to deliver, in the cause's transaction (a second write of one operation
    id is a no-op: the first one stands). Once it commits, the store says so
    (`Store.triggers_queued`), for the process that caused it to deliver it."""
    uow.queued_triggers = True
    kept = dict(payload) if fired_by_agent is None else {**payload, _BY_AGENT: fired_by_agent}
    uow.conn.execute(
        _PUT,
        {
            "o_op": operation_id,
            "o_task": task_id,
            "o_trigger": trigger,
            "o_payload": json.dumps(kept, separators=(",", ":")),
            "o_at": ids.now(),
        },
    )


def pending(conn: sa.Connection, limit: int = 500) -> list[Pending]:
    """Undelivered triggers, oldest first."""
    out = t.trigger_outbox
    found = conn.execute(
        sa.select(out).order_by(out.c.created_at, out.c.operation_id).limit(limit)
    ).mappings()
    rows = []
    for r in found:
        payload = json.loads(r["payload"])
        by_agent = payload.pop(_BY_AGENT, None)
        rows.append(
            Pending(
                r["operation_id"], r["task_id"], r["trigger"], payload, r["created_at"], by_agent
            )
        )
    return rows


def remove(uow: UnitOfWork, operation_id: str) -> None:
    out = t.trigger_outbox
    uow.conn.execute(sa.delete(out).where(out.c.operation_id == operation_id))


def digest(parts: Iterable[str]) -> str:
    """The first 16 hex characters of a SHA-256 over `parts`, sorted: a set's name."""
    return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()[:16]


def children_operation(parent_id: str, child_ids: Iterable[str]) -> str:
    """`children_completed:<parent id>:<digest of the set>`: once per completed set of
    children (a child added later makes a new set, which fires again when it completes)."""
    return f"children_completed:{parent_id}:{digest(child_ids)}"


def blockers_operation(task_id: str, resolution: str) -> str:
    """`blockers_resolved:<task id>:<resolution>`: once per resolution, each the arrival of the
    last blocker at its terminal step (named by that arrival)."""
    return f"blockers_resolved:{task_id}:{resolution}"


def note_children(uow: UnitOfWork, parent_id: str, finished: str | None = None) -> bool:
    """Queue on_children_completed on `parent_id` when every non-archived child of it is
    terminal (`finished`, a child whose arrival at its terminal step this transaction holds,
    counts as terminal whatever its row says yet). True when it was queued."""
    children = uow.conn.execute(
        sa.select(TASKS.c.id, TASKS.c.state).where(
            TASKS.c.parent_id == parent_id, TASKS.c.archived_at.is_(None)
        )
    ).all()
    if not children:
        return False
    states = {str(i): ("COMPLETED" if i == finished else str(s)) for i, s in children}
    if any(state not in TERMINAL_STATES for state in states.values()):
        return False
    put(
        uow,
        children_operation(parent_id, states),
        parent_id,
        "on_children_completed",
        {"children": sorted(states)},
    )
    return True


def note_blocked(uow: UnitOfWork, blocker_id: str, resolution: str) -> list[str]:
    """Queue on_blocker_resolved on each task `blocker_id` blocks whose blockers are now all
    terminal (`blocker_id` itself counts as terminal: its arrival is this transaction's). The
    ids of the tasks it was queued on."""
    blockers = t.task_blockers
    blocked = [
        str(r)
        for r in uow.conn.execute(
            sa.select(blockers.c.task_id).where(blockers.c.blocker_id == blocker_id)
        ).scalars()
    ]
    if not blocked:
        return []
    other = blockers.alias("other")
    rows = uow.conn.execute(
        sa.select(other.c.task_id, other.c.blocker_id, TASKS.c.state)
        .join(TASKS, TASKS.c.id == other.c.blocker_id)
        .where(other.c.task_id.in_(blocked))
    ).all()
    by_task: dict[str, dict[str, str]] = {}
    for task_id, blocker, state in rows:
        by_task.setdefault(str(task_id), {})[str(blocker)] = (
            "COMPLETED" if blocker == blocker_id else str(state)
        )
    queued = []
    for task_id in sorted(by_task):
        states = by_task[task_id]
        if all(state in TERMINAL_STATES for state in states.values()):
            put(
                uow,
                blockers_operation(task_id, resolution),
                task_id,
                "on_blocker_resolved",
                {"resolved_blocker_ids": sorted(states)},
            )
            waits.end(uow, task_id, "blocked")
            queued.append(task_id)
    return queued


def note_terminal(uow: UnitOfWork, task_id: str, parent_id: str | None, resolution: str) -> None:
    """A task arrived at its terminal step in this transaction: what that may complete (its
    parent's children, the blockers of the tasks it blocks) is queued with it."""
    if parent_id is not None:
        note_children(uow, parent_id, finished=task_id)
    note_blocked(uow, task_id, resolution)
