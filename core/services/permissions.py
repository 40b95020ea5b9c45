"""Permission requests of ACP agents a person answers (AGENTS.md `--permissions ask`, CLI.md
`permission list|allow|deny`, HTTP.md `/api/permissions`).

A request is a row that leaves `pending` exactly once: the answer is a conditional UPDATE
(`... WHERE state = 'pending'`) whose row count decides, so of two people answering at once,
or a person and a run that ends, one wins and the other is told what the row became. Each
change writes its event in the same transaction (`permission.requested`,
`permission.resolved`). A person's answer fires `on_approval_resolved` on the task with the
operation id `permission:<id>`, so a trigger delivered twice evaluates once.

The waiting turn (`wait`) learns of an answer at once (`core.store.events.Commits`: the
board's NOTIFY on PostgreSQL, its wake-up socket on SQLite; within `POLL_S` on a SQLite board
where no socket could be had).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa

from core import actors, ids, runs
from core.engine import TriggerResult
from core.errors import Conflict, LanewayError, NotFound
from core.model import PERMISSION_STATES, Permission
from core.services.base import Lazy, Service
from core.services.refs import resolve_id
from core.store import events, rows
from core.store import tables as t
from core.text import require_text

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.tasks import TaskService

P = t.permissions

POLL_S: Final = 0.2
"""How often a waiting turn re-reads its request on SQLite (and checks its turn is alive)."""
RECHECK_S: Final = 2.0
"""PostgreSQL: the row is re-read this often even without a NOTIFY (a missed one is late,
never lost)."""
DEFAULT_BY: Final = "user"
ALLOW_ONCE: Final = ("allow_once",)
ALLOW_ALWAYS: Final = ("allow_always",)
REJECT: Final = ("reject_once", "reject_always")


def operation_id(permission_id: str) -> str:
    """The on_approval_resolved operation id of a request (kept in `applied_operations`)."""
    return f"permission:{permission_id}"


DELIVERY_WAIT_S: Final = 5.0
"""How long a waiting turn gives the answering process to deliver on_approval_resolved."""


def wait_delivered(peers: Peers, operation: str, *, stop: Callable[[], bool]) -> bool:
    """Wait until the answer's on_approval_resolved delivery (`operation`) is applied, at most
    DELIVERY_WAIT_S: whether it was.

    The process that answers commits the answer, then fires the trigger, which is evaluated at
    the task's step as it then stands. The waiting turn learns of the answer at the commit; had
    it gone on at once, an agent that ends its turn there could move the task on before the
    trigger was evaluated, and the step's on_approval_resolved would never run. Bounded: an
    answering process that died between the two leaves the turn waiting no longer than this."""
    import time

    deadline = time.monotonic() + DELIVERY_WAIT_S
    return events.wait_until(
        peers.store,
        lambda: peers.operations.is_applied(operation),
        lambda applied: applied,
        stop=lambda: stop() or time.monotonic() >= deadline,
        poll_s=POLL_S,
        recheck_s=RECHECK_S,
    )


class PermissionService(Service):
    """The board's permission requests, and the on_approval_resolved trigger an answer fires."""

    def __init__(self, peers: Peers, *, tasks: Lazy[TaskService]) -> None:
        super().__init__(peers)
        self._tasks = tasks

    def request(
        self,
        task_id: str,
        session_id: str,
        *,
        run_id: str | None,
        tool_call: Mapping[str, Any],
        options: Sequence[Mapping[str, Any]],
    ) -> Permission:
        """Put an agent's question on the board, `pending` until answered."""
        self._require_writer()
        found = Permission(
            id=ids.new_id(),
            task_id=task_id,
            session_id=session_id,
            run_id=run_id,
            tool_call=dict(tool_call),
            options=[dict(o) for o in options],
            state="pending",
            option_id=None,
            decided_by=None,
            created_at=ids.now(),
            decided_at=None,
        )
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(P).values(
                    id=found.id,
                    task_id=found.task_id,
                    session_id=found.session_id,
                    run_id=found.run_id,
                    tool_call=json.dumps(found.tool_call),
                    options=json.dumps(found.options),
                    state=found.state,
                    created_at=found.created_at,
                )
            )
            events.record(
                uow,
                "permission.requested",
                task_id,
                permission_id=found.id,
                run_id=run_id,
                state="pending",
            )
            events.record(
                uow,
                "task.needs_person",
                task_id,
                reason="permission",
                permission_id=found.id,
                run_id=run_id,
            )
        return found

    def answer(
        self, ref: str, allow: bool, *, always: bool = False, by: str = DEFAULT_BY
    ) -> Permission:
        """Allow (the request's first `allow_once` option; `allow_always` with `always`) or
        deny (its first `reject_once`/`reject_always`, or none: the agent is told
        `cancelled`) a pending request, then fire on_approval_resolved on its task.

        A request no longer pending is a Conflict naming the state it is in."""
        self._require_writer()
        if not by.strip():
            raise LanewayError("permission answer: 'by' must not be empty")
        require_text(by, "permission answer 'by'", t.column_length(P.c.decided_by))
        found = self.find(ref)
        if found.state != "pending":
            raise _answered(found)
        if allow:
            kinds = ALLOW_ALWAYS if always else ALLOW_ONCE
            option_id = _pick(found.options, kinds)
            if option_id is None:
                offered = ", ".join(str(o.get("kind")) for o in found.options) or "no options"
                raise LanewayError(
                    f"permission {found.id}: the agent offers no {kinds[0]} option "
                    f"(it offers: {offered})"
                )
        elif always:
            raise LanewayError("permission answer: 'always' goes with allow, not deny")
        else:
            option_id = _pick(found.options, REJECT)
        state = "allowed" if allow else "denied"
        with self.peers.store.transaction() as uow:
            won = uow.conn.execute(
                sa.update(P)
                .where(P.c.id == found.id, P.c.state == "pending")
                .values(
                    state=state,
                    option_id=option_id,
                    decided_by=by,
                    decided_at=ids.now(),
                    actor=actors.current(),
                )
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if won == 1:
                events.record(
                    uow,
                    "permission.resolved",
                    found.task_id,
                    permission_id=found.id,
                    run_id=found.run_id,
                    state=state,
                )
                events.record(
                    uow,
                    "task.needs_person_ended",
                    found.task_id,
                    reason="permission",
                    permission_id=found.id,
                    run_id=found.run_id,
                )
        after = self.get(found.id)
        if won != 1:
            raise _answered(after)
        self.fire(after)
        return after

    def fire(self, permission: Permission) -> TriggerResult:
        """Deliver the answer's on_approval_resolved: evaluated once per request (its
        operation id is claimed in the ledger), a second delivery does nothing."""
        self._require_writer()
        return self.peers.engine.handle_trigger(
            permission.task_id,
            "on_approval_resolved",
            session_id=permission.session_id,
            operation_id=operation_id(permission.id),
            payload={
                "permission_id": permission.id,
                "state": permission.state,
                "option_id": permission.option_id,
                "decided_by": permission.decided_by,
            },
        )

    def cancel(self, permission_id: str, *, by: str) -> bool:
        """End one request `cancelled` (`by` says why) when it is still pending."""
        self._require_writer()
        with self.peers.store.transaction() as uow:
            return bool(runs.cancel_permissions(uow, permission_ids=[permission_id], by=by))

    def cancel_pending(self, *, run_id: str, by: str = "run_ended") -> list[str]:
        """End the run's pending requests `cancelled`: the run ended, or its worker died."""
        self._require_writer()
        with self.peers.store.transaction() as uow:
            return runs.cancel_permissions(uow, [run_id], by=by)

    def wait(self, permission_id: str, *, stop: Callable[[], bool]) -> Permission:
        """Block until the request is answered, or `stop()` says its turn is over (checked
        every POLL_S), then until the answer's on_approval_resolved has been delivered
        (`wait_delivered`); the request as it then stands."""
        found = events.wait_until(
            self.peers.store,
            lambda: self.get(permission_id),
            lambda found: found.state != "pending",
            stop=stop,
            poll_s=POLL_S,
            recheck_s=RECHECK_S,
        )
        if found.state in ("allowed", "denied"):  # answered by a person: fired after
            wait_delivered(self.peers, operation_id(found.id), stop=stop)
        return found

    def get(self, permission_id: str) -> Permission:
        with self.peers.store.read() as conn:
            row = conn.execute(sa.select(P).where(P.c.id == permission_id)).mappings().first()
        if row is None:
            raise NotFound(f"no permission request {permission_id!r}")
        return rows.permission(row)

    def find(self, ref: str) -> Permission:
        """A request by its id or a unique suffix of it (at least 6 characters, CLI.md)."""
        with self.peers.store.read() as conn:
            permission_id = resolve_id(conn, P.c.id, ref, "permission request")
        return self.get(permission_id)

    def list(self, *, task: str | None = None, state: str | None = None) -> list[Permission]:
        """Requests, oldest first; `task` and `state` narrow them."""
        query = sa.select(P).order_by(P.c.created_at, P.c.id)
        if state is not None:
            if state not in PERMISSION_STATES:
                raise LanewayError(
                    f"permission state {state!r}: expected one of {', '.join(PERMISSION_STATES)}"
                )
            query = query.where(P.c.state == state)
        if task is not None:
            query = query.where(P.c.task_id == self._tasks().get(task).id)
        with self.peers.store.read() as conn:
            return [rows.permission(r) for r in conn.execute(query).mappings()]


def _pick(options: Sequence[Mapping[str, Any]], kinds: tuple[str, ...]) -> str | None:
    for kind in kinds:
        for option in options:
            if option.get("kind") == kind and option.get("option_id"):
                return str(option["option_id"])
    return None


def _answered(found: Permission) -> Conflict:
    by = f" by {found.decided_by}" if found.decided_by else ""
    return Conflict(f"permission {found.id} is already {found.state}{by}; it cannot be answered")
