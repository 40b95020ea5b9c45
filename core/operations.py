"""Durable operation ids: one failure dispatches on_agent_error once, across processes and
restarts (on-agent-error AC-C3/AC-C5, made durable by issue 9).

An operation id (`agent_error:session:<session>:<execution>`, Office's `agent_error:<run>`) is
a row of `applied_operations`, keyed by the id. The engine:

1. claims it with one conditional INSERT (`ON CONFLICT DO NOTHING`, the same text on SQLite
   and PostgreSQL): the row count decides, so of two processes delivering the same failure
   exactly one evaluates it. A row left `running` by a dead epoch is re-claimed by one
   conditional UPDATE; a `running` row of a live epoch (a peer thread, or another process) is
   left to it and the delivery is idempotent, silently;
2. marks it `applied` once every action succeeded, *before* the transition is applied, so a
   transition refused afterwards is not retried by a redelivery (AC-C7);
3. releases it (deletes the `running` row) when an action fails or the evaluation raises, so a
   redelivery re-runs the list from the start (AC-C6, AC-C8).

Rows older than the retention window (`RETENTION_S`, seven days by default; `Host.
operation_retention_s`) are deleted: a failure is a live event, redelivered within seconds or
across a restart, never a week later. Each process prunes at its first claim and then at most
once an hour.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import sqlalchemy as sa

from core import ids
from core.store import tables as t
from core.store.database import Store

OPS = t.applied_operations
RETENTION_S = 7 * 24 * 3600
PRUNE_EVERY_S = 3600
MAX_KEY = 400

_CLAIM = sa.text(
    "INSERT INTO applied_operations (operation_id, state, epoch, created_at) "
    "VALUES (:b_key, 'running', :b_epoch, :b_stamp) ON CONFLICT (operation_id) DO NOTHING"
)
_KEY = OPS.c.operation_id == sa.bindparam("b_key")
_STATE = sa.select(OPS.c.state, OPS.c.epoch).where(_KEY)
_RECLAIM = (
    sa.update(OPS)
    .where(_KEY, OPS.c.state == "running", OPS.c.epoch == sa.bindparam("b_holder"))
    .values(epoch=sa.bindparam("b_epoch"), created_at=sa.bindparam("b_stamp"))
)
_APPLIED = (
    sa.update(OPS)
    .where(_KEY, OPS.c.state == "running", OPS.c.epoch == sa.bindparam("b_epoch"))
    .values(state="applied")
)
_RELEASE = sa.delete(OPS).where(
    _KEY, OPS.c.state == "running", OPS.c.epoch == sa.bindparam("b_epoch")
)
_PRUNE = sa.delete(OPS).where(OPS.c.created_at < sa.bindparam("cutoff"))


def key_of(operation_id: str) -> str:
    """The stored key: the id itself, or (for an id longer than the column, which a caller's
    execution id can make) a prefix and the id's SHA-256."""
    if len(operation_id) <= MAX_KEY:
        return operation_id
    digest = hashlib.sha256(operation_id.encode()).hexdigest()
    return f"{operation_id[: MAX_KEY - 72]}:sha256:{digest}"


class Operations:
    """One host's view of the table: its epoch, its liveness test and its pruning clock."""

    def __init__(
        self,
        store: Store,
        epoch: Callable[[], str | None],
        is_dead: Callable[[str], bool],
        retention_s: float = RETENTION_S,
    ) -> None:
        self.store = store
        self.epoch = epoch
        self.is_dead = is_dead
        self.retention_s = retention_s
        self._pruned_at: float | None = None

    def _epoch(self) -> str:
        """The epoch to claim under, asked afresh each time (a host may fence itself onto a
        new one)."""
        epoch = self.epoch()
        if epoch is None:
            from core.errors import ReadOnly

            raise ReadOnly("this host was opened read-only")
        return epoch

    def claim(self, operation_id: str) -> bool:
        """True when this delivery is the one that evaluates the operation."""
        epoch = self._epoch()
        self._maybe_prune()
        key = key_of(operation_id)
        stamp = ids.now()
        with self.store.transaction() as uow:
            values = {"b_key": key, "b_epoch": epoch, "b_stamp": stamp}
            if uow.conn.execute(_CLAIM, values).rowcount == 1:
                return True
            row = uow.conn.execute(_STATE, {"b_key": key}).first()
            if row is None:
                return False  # released by a concurrent delivery: that one was this one
            state, holder = row
            if state != "running" or holder is None or holder == epoch:
                return False
            if not self.is_dead(holder):
                return False
            taken = uow.conn.execute(_RECLAIM, {**values, "b_holder": holder})
            return taken.rowcount == 1

    def mark_applied(self, operation_id: str) -> None:
        with self.store.transaction() as uow:
            uow.conn.execute(_APPLIED, {"b_key": key_of(operation_id), "b_epoch": self._epoch()})

    def release(self, operation_id: str) -> None:
        with self.store.transaction() as uow:
            uow.conn.execute(_RELEASE, {"b_key": key_of(operation_id), "b_epoch": self._epoch()})

    def is_applied(self, operation_id: str) -> bool:
        with self.store.read() as conn:
            row = conn.execute(_STATE, {"b_key": key_of(operation_id)}).first()
        return row is not None and row[0] == "applied"

    def prune(self) -> int:
        """Delete ids claimed longer ago than the retention window; returns how many."""
        cutoff = ids.shift(ids.now(), -self.retention_s)
        with self.store.transaction() as uow:
            count = uow.conn.execute(_PRUNE, {"cutoff": cutoff}).rowcount
        self._pruned_at = time.monotonic()
        return int(count or 0)

    def _maybe_prune(self) -> None:
        if self._pruned_at is None or time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:
            self.prune()
