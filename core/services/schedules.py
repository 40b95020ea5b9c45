"""Schedules (issue 42 item 4; CLI.md `schedule ...`): a task created once per slot.

A schedule's slots are the multiples of its `every_seconds` since the Unix epoch, as a
heartbeat's are (core.services.triggers). Every process that runs the scheduler (each `worker`
and writable `serve`) calls `fire_due` on each pass; no leader is elected. A slot's task is
made in one transaction with a conditional UPDATE raising the schedule's `last_slot` to the
slot's start: the row count decides, so of any number of passes exactly one makes it, and the
operation id `schedule:<id>:<slot start>` is recorded in `applied_operations` beside it.

Only the current slot is ever fired: slots missed while no process ran are not made up one by
one; the first pass after a restart makes the current slot's one task. The first slot to fire
is the one after `schedule add` (adding at 14:00 a daily schedule makes its first task at the
next midnight UTC, not at once). Like `task create`, the task is created, not started: it
stands at its step (the workflow's start step by default) until a person, or a trigger of that
step, starts it.
"""

from __future__ import annotations

import builtins
import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import attrs
import sqlalchemy as sa

from core import ids, wip
from core.errors import Conflict, LanewayError, NotFound
from core.logs import logger
from core.services.base import Lazy, Service
from core.store import tables as t
from core.store.dialect import upsert_into
from core.text import require_text

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.workflows import WorkflowService

S = t.schedules
MAX_EVERY_S: Final = 366 * 86400
"""A slot at most a (leap) year long: a longer one is almost surely a typo (`--every 10^30`)."""


def operation_id(schedule_id: str, slot_start: int) -> str:
    """The operation id of one slot (CLI.md)."""
    return f"schedule:{schedule_id}:{slot_start}"


def parse_every(value: str | int) -> int:
    """`--every`: a whole number of seconds, 1 to MAX_EVERY_S; anything else is one line."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        raise LanewayError(f"--every {text!r}: must be a whole number of seconds") from None
    if not math.isfinite(number):
        raise LanewayError(f"--every {text!r}: must be a finite whole number of seconds")
    if number <= 0:
        raise LanewayError(f"--every {text!r}: must be at least 1 second")
    if number > MAX_EVERY_S:
        raise LanewayError(f"--every {text!r}: must be at most {MAX_EVERY_S} seconds (366 days)")
    if number != int(number):
        raise LanewayError(f"--every {text!r}: must be a whole number of seconds")
    return int(number)


@attrs.frozen
class Schedule:
    id: str
    workflow_id: str
    step_id: str | None
    title: str
    description: str
    every_seconds: int
    last_slot: int
    created_at: str

    @property
    def next_at(self) -> int:
        """When its next slot starts (Unix seconds)."""
        return self.last_slot + self.every_seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workflow_id": self.workflow_id,
            "step_id": self.step_id,
            "title": self.title,
            "description": self.description,
            "every": self.every_seconds,
            "next_at": ids.format_ts(datetime.fromtimestamp(self.next_at, UTC)),
            "created_at": self.created_at,
        }


def _schedule(row: Any) -> Schedule:
    return Schedule(
        id=str(row.id),
        workflow_id=str(row.workflow_id),
        step_id=None if row.step_id is None else str(row.step_id),
        title=str(row.title),
        description=str(row.description),
        every_seconds=int(row.every_seconds),
        last_slot=int(row.last_slot),
        created_at=str(row.created_at),
    )


def _slot(now: int, every: int) -> int:
    return now - now % every


_NOW = sa.bindparam("s_now", type_=sa.BigInteger)
_DUE = (
    sa.select(S)
    .where(S.c.last_slot < _NOW - (_NOW % S.c.every_seconds))
    .order_by(S.c.created_at, S.c.id)
)
_RAISE = (
    sa.update(S)
    .where(S.c.id == sa.bindparam("s_id"), S.c.last_slot < sa.bindparam("s_slot"))
    .values(last_slot=sa.bindparam("s_slot"))
    .execution_options(preserve_rowcount=True)
)


class ScheduleService(Service):
    """`schedule add/list/remove`, and the scheduler's `fire_due`."""

    def __init__(self, peers: Peers, *, workflows: Lazy[WorkflowService]) -> None:
        super().__init__(peers)
        self._workflows = workflows

    def add(
        self,
        *,
        workflow: str,
        title: str,
        every: str | int,
        description: str = "",
        step: str | None = None,
    ) -> Schedule:
        """A schedule whose first task comes at the start of the next slot."""
        self._require_writer()
        seconds = parse_every(every)
        if not title.strip():
            raise LanewayError("--title: must not be empty")
        require_text(title, "--title", t.column_length(t.tasks.c.title))
        require_text(description, "--description")
        wf = self._workflows().get(workflow)
        step_id = self._workflows().step(wf, step).id if step else None
        made = Schedule(
            id=ids.new_id(),
            workflow_id=wf.id,
            step_id=step_id,
            title=title,
            description=description,
            every_seconds=seconds,
            last_slot=_slot(int(time.time()), seconds),
            created_at=ids.now(),
        )
        with self.peers.store.transaction() as uow:
            uow.conn.execute(sa.insert(S).values(**attrs.asdict(made)))
        return made

    def list(self) -> builtins.list[Schedule]:
        with self.peers.store.read() as conn:
            return [
                _schedule(r) for r in conn.execute(sa.select(S).order_by(S.c.created_at, S.c.id))
            ]

    def remove(self, schedule_id: str) -> Schedule:
        self._require_writer()
        with self.peers.store.transaction() as uow:
            row = uow.conn.execute(sa.select(S).where(S.c.id == schedule_id)).first()
            if row is None:
                raise NotFound(f"no schedule {schedule_id!r}")
            uow.conn.execute(sa.delete(S).where(S.c.id == schedule_id))
        return _schedule(row)

    def fire_due(self, now: float | None = None) -> int:
        """Create the task of each schedule's current slot not yet made: how many this call
        made (another process's pass may have made the rest)."""
        self._require_writer()
        stamp = int(time.time() if now is None else now)
        with self.peers.store.read() as conn:
            due = [_schedule(r) for r in conn.execute(_DUE, {"s_now": stamp})]
        made = 0
        for found in due:
            made += self._fire(found, _slot(stamp, found.every_seconds))
        return made

    def _fire(self, found: Schedule, slot: int) -> int:
        op = operation_id(found.id, slot)
        log = logger.bind(schedule_id=found.id, operation_id=op)
        try:
            wf = self.peers.repository.workflow(found.workflow_id)
            target = wf.step(found.step_id) if found.step_id else wf.start_step
            if target is None:
                raise Conflict(f"the step {found.step_id} is no longer in workflow {wf.name!r}")
            task_id = ids.new_id()
            with self.peers.store.transaction() as uow:
                if not self._spend(uow.conn, found.id, slot, op):
                    return 0
                values = {
                    "id": task_id,
                    "workspace_id": wf.workspace_id,
                    "title": found.title,
                    "description": found.description,
                }
                wip.place_new_task(uow, values, wf, target)
        except (Conflict, NotFound) as exc:
            # the slot is spent all the same: one ERROR per slot, not one per pass
            with self.peers.store.transaction() as uow:
                spent = self._spend(uow.conn, found.id, slot, op)
            if spent:
                log.bind(cause=str(exc)).error("scheduled task not created")
            return 0
        log.bind(task_id=task_id).info("scheduled task created")
        return 1

    @staticmethod
    def _spend(conn: sa.Connection, schedule_id: str, slot: int, op: str) -> bool:
        """Raise the schedule's last slot to `slot`: True when this call did (the row count
        decides among processes), recording the slot's operation id beside it."""
        if conn.execute(_RAISE, {"s_id": schedule_id, "s_slot": slot}).rowcount != 1:
            return False
        conn.execute(
            upsert_into(conn.dialect.name, t.applied_operations)
            .values(operation_id=op, state="applied", epoch=None, created_at=ids.now())
            .on_conflict_do_nothing()
            .execution_options(preserve_rowcount=True)
        )
        return True
