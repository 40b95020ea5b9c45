"""Delivering the triggers no person fires: what the outbox holds (on_children_completed,
on_blocker_resolved, on_budget_alert, and an on_comment whose process died before delivering
it; `core.outbox`) and on_heartbeat, each slot of each
task standing at a step with `heartbeat_seconds`.

Both are decided by durable operation ids (`applied_operations`, claimed by one conditional
INSERT), never by a leader: every `worker` and `serve` runs `run_pass` (`core.services.
scheduler`), any number of them at once, and a trigger still evaluates once.

Heartbeats: a step's slots are the multiples of its `heartbeat_seconds` since the Unix epoch;
the operation id `heartbeat:<task>:<step>:<slot start>` names one, and is spent even when an
action fails (one ERROR per slot; the next slot tries again). A pass fires only the current
slot: a slot missed while nothing ran is never fired late, and the current one, when it was
missed, fires once, on the first pass that sees it. Which tasks are due is one query
(the tasks at heartbeat steps whose current slot's id is not in `applied_operations`), not a
query per task.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa

from core import faults, outbox
from core.engine import TriggerResult
from core.errors import NotFound
from core.logs import logger
from core.services import unattended
from core.services.base import Lazy, Service
from core.store import tables as t

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.sessions import SessionService

TASKS = t.tasks
STEPS = t.workflow_steps
OPS = t.applied_operations
ITEMS = t.transcript_items
SESSIONS = t.task_sessions
SUMMARY_KINDS = ("message", "output")
"""The transcript items a child's summary line is taken from (its agent's words)."""
MAX_SUMMARY = 500


def heartbeat_operation(task_id: str, step_id: str, slot_start: int) -> str:
    """The on_heartbeat operation id of one slot (CLI.md)."""
    return f"heartbeat:{task_id}:{step_id}:{slot_start}"


def _due_query() -> sa.Select[Any]:
    """Tasks standing (admitted, not archived) at a heartbeat step whose current slot has not
    been claimed: one statement, an anti-join on the operation ids' primary key."""
    now = sa.bindparam("h_now", type_=sa.BigInteger)
    slot = now - (now % STEPS.c.heartbeat_seconds)
    key = (
        sa.literal("heartbeat:")
        + TASKS.c.id
        + sa.literal(":")
        + STEPS.c.id
        + sa.literal(":")
        + sa.cast(slot, sa.String)
    )
    claimed = sa.select(OPS.c.operation_id).where(OPS.c.operation_id == key).exists()
    # The heartbeat steps' ids as a list first: SQLite, which keeps no statistics, otherwise
    # walks every task of the board in id order to find the few at such a step (160 ms of
    # `serve`'s scheduler every second at 100,000 tasks, against 0.02 ms by the step index;
    # issue 45 item 5).
    beating = STEPS.alias("beating")
    at_beating_step = TASKS.c.workflow_step_id.in_(
        sa.select(beating.c.id).where(beating.c.heartbeat_seconds.is_not(None))
    )
    return (
        sa.select(TASKS.c.id, STEPS.c.id.label("step_id"), slot.label("slot"))
        .select_from(TASKS.join(STEPS, STEPS.c.id == TASKS.c.workflow_step_id))
        .where(
            at_beating_step,
            STEPS.c.heartbeat_seconds.is_not(None),
            TASKS.c.archived_at.is_(None),
            TASKS.c.wip_admitted.is_(True),
            ~claimed,
        )
        .order_by(TASKS.c.id)
    )


DUE = _due_query()


@attrs.frozen
class PassReport:
    """What one scheduler pass delivered."""

    delivered: int = 0
    heartbeats: int = 0
    idempotent: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return attrs.asdict(self)


class TriggerService(Service):
    """The scheduler's work: the outbox's triggers and the heartbeats."""

    def __init__(self, peers: Peers, *, sessions: Lazy[SessionService]) -> None:
        super().__init__(peers)
        self._sessions = sessions

    def run_pass(self, now: float | None = None) -> PassReport:
        """One pass: deliver what the outbox holds, then fire the heartbeats due, then say (once)
        which hosts queued runs wait for with no worker alive there."""
        self._require_writer()
        drained = self.drain()
        beats = self.heartbeats(now)
        unattended.notice(self.peers)  # runs that wait for a host no worker is alive on
        return PassReport(
            delivered=drained.delivered,
            heartbeats=beats.heartbeats,
            idempotent=drained.idempotent + beats.idempotent,
            failed=drained.failed + beats.failed,
        )

    # -- the outbox ---------------------------------------------------------------------------

    def drain(self) -> PassReport:
        """Deliver every trigger the outbox holds, each under its operation id; a row is
        deleted once its operation is applied (by this delivery or an earlier one), and
        left while a live peer is delivering it (that peer may yet die before applying it)."""
        self._require_writer()
        delivered = idempotent = failed = 0
        while True:
            with self.peers.store.read() as conn:
                found = outbox.pending(conn)
            progress = False
            for row in found:
                try:
                    result = self._deliver(row)
                except NotFound:
                    result = None  # the task is gone: nothing to deliver to
                if result is None or result.failed or not result.idempotent:
                    failed += int(result is not None and result.failed)
                    delivered += int(result is not None and not result.failed)
                elif not self.peers.operations.is_applied(row.operation_id):
                    idempotent += 1
                    continue  # a live peer holds it: its row stays until applied
                else:
                    idempotent += 1
                faults.reach("outbox.after_deliver")
                with self.peers.store.transaction() as uow:
                    outbox.remove(uow, row.operation_id)
                progress = True
            if not progress or len(found) < 500:
                return PassReport(delivered=delivered, idempotent=idempotent, failed=failed)

    def _deliver(self, row: outbox.Pending) -> TriggerResult:
        payload: Mapping[str, Any] = row.payload
        if row.trigger == "on_children_completed":
            children = self.children_summaries(row.payload.get("children", []))
            payload = {"children": children, "message": _children_message(children)}
        elif row.trigger == "on_blocker_resolved":
            resolved = row.payload.get("resolved_blocker_ids", [])
            payload = {**row.payload, "message": _blockers_message(resolved)}
        elif row.trigger == "on_budget_alert":
            payload = {**row.payload, "message": _budget_message(row.payload)}
        live = self._sessions().live(row.task_id)
        result = self.peers.engine.handle_trigger(
            row.task_id,
            row.trigger,
            session_id=live.id if live is not None else None,
            operation_id=row.operation_id,
            payload=payload,
            fired_by_agent=row.fired_by_agent,
        )
        if not result.idempotent:
            logger.bind(
                task_id=row.task_id,
                trigger=row.trigger,
                operation_id=row.operation_id,
                transitioned=result.transitioned,
                failed=result.failed,
            ).info("trigger delivered")
        return result

    def children_summaries(self, child_ids: builtins.list[str]) -> builtins.list[dict[str, Any]]:
        """Each child's id, state and the last line its agent wrote (`summary`, "" when it
        wrote nothing): the on_children_completed payload."""
        if not child_ids:
            return []
        with self.peers.store.read() as conn:
            found = {
                str(i): (str(title), str(state))
                for i, title, state in conn.execute(
                    sa.select(TASKS.c.id, TASKS.c.title, TASKS.c.state).where(
                        TASKS.c.id.in_(child_ids)
                    )
                ).all()
            }
            summaries: dict[str, str] = {}
            for child in child_ids:
                text = conn.execute(
                    sa.select(ITEMS.c.text)
                    .join(SESSIONS, SESSIONS.c.id == ITEMS.c.session_id)
                    .where(SESSIONS.c.task_id == child, ITEMS.c.kind.in_(SUMMARY_KINDS))
                    .order_by(ITEMS.c.at.desc(), ITEMS.c.seq.desc())
                    .limit(1)
                ).scalar()
                summaries[child] = _last_line(text or "")
        return [
            {
                "task_id": c,
                "title": found.get(c, ("", ""))[0],
                "state": found.get(c, ("", None))[1],
                "summary": summaries.get(c, ""),
            }
            for c in child_ids
        ]

    # -- heartbeats ---------------------------------------------------------------------------

    def due_heartbeats(self, now: float | None = None) -> builtins.list[tuple[str, str, int]]:
        """(task id, step id, slot start) of each heartbeat due now: one query."""
        stamp = int(time.time() if now is None else now)
        with self.peers.store.read() as conn:
            return [
                (str(task), str(step), int(slot))
                for task, step, slot in conn.execute(DUE, {"h_now": stamp}).all()
            ]

    def heartbeats(self, now: float | None = None) -> PassReport:
        """Fire on_heartbeat for each task whose step's current slot has not fired."""
        self._require_writer()
        fired = idempotent = failed = 0
        for task_id, step_id, slot in self.due_heartbeats(now):
            try:
                task = self.peers.repository.task(task_id)
                if task.workflow_step_id != step_id or task.archived_at is not None:
                    continue  # it moved on since the query read it: that step's slot is not its
                live = self._sessions().live(task_id)
                result = self.peers.engine.handle_trigger(
                    task_id,
                    "on_heartbeat",
                    session_id=live.id if live is not None else None,
                    operation_id=heartbeat_operation(task_id, step_id, slot),
                    payload={"slot_start": slot},
                    task=task,
                    # a failing action fails once per slot, not at every pass of the slot
                    failure_spends=True,
                )
            except NotFound:
                continue  # deleted since the query read it
            if result.idempotent:
                idempotent += 1
            elif result.failed:
                failed += 1
            else:
                fired += 1
        return PassReport(heartbeats=fired, idempotent=idempotent, failed=failed)


def _children_message(children: builtins.list[dict[str, Any]]) -> str:
    """What the parent's agent is told (its run's prompt ends with it)."""
    lines = ["All subtasks of this task are done:"]
    for c in children:
        summary = f": {c['summary']}" if c["summary"] else ""
        lines.append(f"- {c['title']} ({c['task_id']}) {c['state']}{summary}")
    return "\n".join(lines)


def _blockers_message(resolved: builtins.list[str]) -> str:
    return "The tasks blocking this one are done: " + ", ".join(resolved)


def _budget_message(payload: Mapping[str, Any]) -> str:
    return (
        f"Budget alert: the {payload.get('scope')} budget is {payload.get('budget_pct')}% spent "
        f"(${payload.get('spent_usd', 0):.4f} of ${payload.get('limit_usd', 0):g})."
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:MAX_SUMMARY] if lines else ""
