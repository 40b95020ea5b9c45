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
from typing import Any, Final, Literal

import attrs
import sqlalchemy as sa

from core import ids
from core.store import rows
from core.store import tables as t

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


def enqueue(conn: sa.Connection, request: RunRequest) -> Enqueued:
    """Enqueue inside the caller's transaction."""
    stamp = ids.now()
    if request.idempotency_key:
        found = conn.execute(
            sa.select(R.c.id)
            .where(
                R.c.idempotency_key == request.idempotency_key,
                R.c.requested_at >= ids.shift(stamp, -IDEMPOTENCY_WINDOW_S),
            )
            .limit(1)
        ).scalar()
        if found is not None:
            return Enqueued(found, "suppressed")
    payload = rows.dumps(dict(request.payload)) if request.payload is not None else None
    if not request.coalesce_exempt:
        query = (
            sa.select(R.c.id)
            .where(
                R.c.status == "queued",
                R.c.agent_profile_id == request.agent_profile_id,
                R.c.reason == request.reason,
                R.c.coalesce_exempt.is_(False),
                R.c.requested_at >= ids.shift(stamp, -COALESCE_WINDOW_S),
            )
            .order_by(R.c.requested_at.desc())
            .limit(1)
        )
        if request.reason == "task_assigned":
            query = query.where(R.c.task_id == request.task_id)
        target = conn.execute(query).scalar()
        if target is not None:
            conn.execute(
                sa.update(R)
                .where(R.c.id == target)
                .values(coalesced_count=R.c.coalesced_count + 1, payload=payload)
            )
            return Enqueued(target, "coalesced")
    run_id = ids.new_id()
    conn.execute(
        sa.insert(R).values(
            id=run_id,
            agent_profile_id=request.agent_profile_id,
            task_id=request.task_id,
            workflow_step_id=request.workflow_step_id,
            reason=request.reason,
            payload=payload,
            idempotency_key=request.idempotency_key,
            coalesce_exempt=request.coalesce_exempt,
            status="queued",
            coalesced_count=1,
            requested_at=stamp,
        )
    )
    return Enqueued(run_id, "inserted")
