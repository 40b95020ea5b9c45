"""The runs queue: enqueue with an idempotency window and coalescing.

- Idempotency: a run with the same key requested within the last 24 hours means the request
  already landed; nothing is inserted and the enqueue counts as a success (`suppressed`).
- Coalescing: otherwise, the most recent `queued` run for the same (agent, reason) requested
  within the last 5 seconds absorbs the request (its count goes up, its payload is replaced),
  unless either side is `coalesce_exempt` - which every run an on_enter action enqueues is,
  because coalescing knows nothing of entries and would swallow a re-entry's fresh run.
  `task_assigned` runs coalesce only with runs for the same task (the reference's rule).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

import attrs
import sqlalchemy as sa

from core import ids
from core.store import events, rows
from core.store import tables as t
from core.store.database import UnitOfWork
from core.store.prepared import insert_of

R = t.runs
IDEMPOTENCY_WINDOW_S: Final = 24 * 3600
COALESCE_WINDOW_S: Final = 5


@attrs.frozen
class RunRequest:
    agent_profile_id: str
    task_id: str | None
    workflow_step_id: str | None
    reason: str
    payload: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    coalesce_exempt: bool = False


@attrs.frozen
class Enqueued:
    run_id: str
    outcome: Literal["inserted", "suppressed", "coalesced"]

    @property
    def suppressed(self) -> bool:
        return self.outcome == "suppressed"


def config_digest(values: Mapping[str, Any]) -> str:
    """Canonical digest of an action's effective config: sorted keys, defaults applied by the
    caller, so an omitted value and its explicit default digest alike."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_RECENT_BY_KEY = (
    sa.select(R.c.id)
    .where(R.c.idempotency_key == sa.bindparam("key"), R.c.requested_at >= sa.bindparam("since"))
    .limit(1)
)
_COALESCE_TARGET = (
    sa.select(R.c.id)
    .where(
        R.c.status == "queued",
        R.c.agent_profile_id == sa.bindparam("agent"),
        R.c.reason == sa.bindparam("reason"),
        R.c.coalesce_exempt.is_(False),
        R.c.requested_at >= sa.bindparam("since"),
        # task_assigned runs coalesce only within their own task (the reference's rule)
        sa.or_(R.c.reason != "task_assigned", R.c.task_id == sa.bindparam("task_id")),
    )
    .order_by(R.c.requested_at.desc())
    .limit(1)
)
_COALESCE = (
    sa.update(R)
    .where(R.c.id == sa.bindparam("b_id"))
    .values(coalesced_count=R.c.coalesced_count + 1, payload=sa.bindparam("b_payload"))
)
_INSERT_RUN = insert_of(
    R,
    (
        "id",
        "agent_profile_id",
        "task_id",
        "workflow_step_id",
        "reason",
        "payload",
        "idempotency_key",
        "coalesce_exempt",
        "status",
        "coalesced_count",
        "requested_at",
    ),
)


def enqueue(uow: UnitOfWork, request: RunRequest) -> Enqueued:
    """Enqueue inside the caller's unit of work."""
    now = datetime.now(UTC)
    stamp = ids.format_ts(now)
    if request.idempotency_key:
        since = ids.format_ts(now - timedelta(seconds=IDEMPOTENCY_WINDOW_S))
        found = uow.run(_RECENT_BY_KEY, {"key": request.idempotency_key, "since": since}).scalar()
        if found is not None:
            return Enqueued(found, "suppressed")
    payload = rows.dumps(dict(request.payload)) if request.payload is not None else None
    if not request.coalesce_exempt:
        since = ids.format_ts(now - timedelta(seconds=COALESCE_WINDOW_S))
        target = uow.run(
            _COALESCE_TARGET,
            {
                "agent": request.agent_profile_id,
                "reason": request.reason,
                "since": since,
                "task_id": request.task_id,
            },
        ).scalar()
        if target is not None:
            uow.run(_COALESCE, {"b_id": target, "b_payload": payload})
            return Enqueued(target, "coalesced")
    run_id = ids.new_id()
    uow.run(
        _INSERT_RUN,
        {
            "id": run_id,
            "agent_profile_id": request.agent_profile_id,
            "task_id": request.task_id,
            "workflow_step_id": request.workflow_step_id,
            "reason": request.reason,
            "payload": payload,
            "idempotency_key": request.idempotency_key,
            "coalesce_exempt": request.coalesce_exempt,
            "status": "queued",
            "coalesced_count": 1,
            "requested_at": stamp,
        },
    )
    events.record(
        uow,
        "run.queued",
        request.task_id,
        run_id=run_id,
        agent_profile_id=request.agent_profile_id,
        reason=request.reason,
    )
    return Enqueued(run_id, "inserted")
