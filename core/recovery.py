"""The startup recovery scan over non-terminal step entries (on-enter spec AC-B9).

One indexed query, once per host open, before anything is served; no lease, no timeout. For
each non-terminal entry, in (task_id, step_id, entry_seq) order:

- (e) task, step or declaration cannot be loaded: skipped(unresolvable), warned;
- (a1) the task no longer occupies the entry's step (it stands elsewhere, or is back there
  only queued because the step is full): skipped(step_left);
- (a2) a newer entry exists for the same (task, step): skipped(superseded);
- (b) a halting action (clear_decisions) failed: the entry is closed, not resumed;
- (d) the declaration changed: skipped(declaration_changed) (decided by the walk itself);
- otherwise it is re-dispatched from its first non-terminal position, re-claiming markers
  left in_progress by a dead epoch. Session kinds are never re-run.
- a position held in_progress by a live epoch (another process at work on it right now) is
  that process's: the entry is left to it, silently.
- (f) nothing here prevents the host from starting: a record that fails is logged at ERROR
  and left for the next start; a failing query is logged and the host opens anyway.

The report counts every skip by reason: an entry closed whole (step_left, superseded,
unresolvable, declaration_changed) counts once, and each position a re-dispatch marked
skipped (no_executor, unrecognised, malformed) counts once too, beside `redispatched`.
"""

from __future__ import annotations

from collections import Counter

import attrs
import sqlalchemy as sa
from loguru import logger

from core import entry, ledger
from core.errors import LanewayError
from core.kernel import HasKernel, Kernel, kernel_of
from core.model import Marker, Step, StepEntry, Task
from core.store import rows
from core.store import tables as t
from core.store.database import UnitOfWork

E = t.step_entries


@attrs.frozen
class RecoveryReport:
    scanned: int = 0
    redispatched: int = 0
    skipped: dict[str, int] = attrs.field(factory=dict)
    errors: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "scanned": self.scanned,
            "redispatched": self.redispatched,
            "skipped": dict(self.skipped),
            "errors": self.errors,
        }


def pending_query() -> sa.Select[tuple[object, ...]]:
    """Non-terminal entries with the newest entry_seq of their (task, step): one range scan
    of the pending index plus an index probe per row."""
    pending = E.alias("pending")
    other = E.alias("other")
    newest = (
        sa.select(sa.func.max(other.c.entry_seq))
        .where(other.c.task_id == pending.c.task_id, other.c.step_id == pending.c.step_id)
        .scalar_subquery()
    )
    return (
        sa.select(pending, newest.label("newest_seq"))
        .where(pending.c.terminal.is_(False))
        .order_by(pending.c.task_id, pending.c.step_id, pending.c.entry_seq)
    )


def scan(source: Kernel | HasKernel) -> RecoveryReport:
    host = kernel_of(source)  # the kernel; named as the bodies were written
    try:
        with host.store.read() as conn:
            found = [
                (rows.entry(r), int(r["newest_seq"]))
                for r in conn.execute(pending_query()).mappings()
            ]
    except Exception as exc:  # noqa: BLE001 - rule (f): the host opens whatever happens here
        logger.bind(cause=f"{type(exc).__name__}: {exc}").error(
            "recovery scan query failed; incomplete entries wait for the next start"
        )
        return RecoveryReport(errors=1)
    skipped: Counter[str] = Counter()
    redispatched = errors = 0
    for record, newest in found:
        try:
            outcome = _recover_one(host, record, newest, skipped)
        except ledger.ClaimLost:
            continue  # a live process is working this entry
        except Exception as exc:  # noqa: BLE001 - rule (f): one bad record never stops the rest
            errors += 1
            logger.bind(
                task_id=record.task_id,
                step_id=record.step_id,
                entry_seq=record.entry_seq,
                cause=f"{type(exc).__name__}: {exc}",
            ).error("recovery could not process an entry; it stays pending for the next start")
            continue
        if outcome == "redispatched":
            redispatched += 1
        elif outcome is not None:
            skipped[outcome] += 1
    report = RecoveryReport(len(found), redispatched, dict(skipped), errors)
    if found:
        logger.bind(**report.as_dict()).info("recovery scan finished")
    return report


def _recover_one(host: Kernel, record: StepEntry, newest: int, skipped: Counter[str]) -> str | None:
    registry = host.bundle().registry
    log = logger.bind(task_id=record.task_id, step_id=record.step_id, entry_seq=record.entry_seq)
    resolved = _resolve(host, record)
    if resolved is None:
        with host.store.transaction() as uow:
            epoch = host.live_epoch()
            ledger.skip_entry(uow, registry, record.id, (), "unresolvable", epoch=epoch)
            _close_open_markers(uow, record.id, "unresolvable", epoch)
        log.warning("entry cannot be resolved (task, step or declaration gone); closed")
        return "unresolvable"
    task, step = resolved
    actions = step.actions("on_enter")
    if task.workflow_step_id != step.id or not task.wip_admitted:
        # queued at the step is standing in line for it, not occupying it
        reason = "step_left"
    elif record.entry_seq != newest:
        reason = "superseded"
    else:
        reason = ""
    if reason:
        with host.store.transaction() as uow:
            ledger.skip_entry(uow, registry, record.id, actions, reason, epoch=host.live_epoch())
        log.bind(reason=reason).info("entry closed without running")
        return reason
    with host.store.read() as conn:
        markers = ledger.load_markers(conn, record.id)
    for decl in actions:
        marker = markers.get((decl.position, decl.kind))
        registered = registry.kind(decl.kind)
        if (
            marker is not None
            and marker.state == "failed"
            and registered is not None
            and registered.kind.halts_entry_on_failure
        ):
            with host.store.transaction() as uow:
                ledger.set_terminal(uow, record.id)
            log.bind(action_type=decl.kind).info("entry halted by a failed action; closed")
            return None
    end = entry.redispatch(host, task, step, record)
    if end == "declaration_changed":
        return end
    _count_position_skips(host, record.id, markers, skipped)
    return "redispatched"


def _count_position_skips(
    host: Kernel, entry_id: str, before: dict[tuple[int, str], Marker], skipped: Counter[str]
) -> None:
    """Positions this re-dispatch marked skipped (they were open before it), by reason."""
    with host.store.read() as conn:
        after = ledger.load_markers(conn, entry_id)
    for key, marker in after.items():
        was = before.get(key)
        if marker.state == "skipped" and (was is None or was.state not in ledger.TERMINAL):
            skipped[marker.reason or "unknown"] += 1


def _resolve(host: Kernel, record: StepEntry) -> tuple[Task, Step] | None:
    try:
        task = host.read.task(record.task_id)
        _workflow, step = host.read.step(record.step_id)
    except (LanewayError, ValueError, TypeError, KeyError):
        # gone, or a stored declaration that no longer decodes: either way nothing can run
        return None
    return task, step


def _close_open_markers(uow: UnitOfWork, entry_id: str, reason: str, epoch: str) -> None:
    """With no declaration to read, mark whatever markers the entry has that are open."""
    for (position, kind), marker in ledger.load_markers(uow.conn, entry_id).items():
        if marker.state not in ledger.TERMINAL:
            ledger.skip_position(uow, entry_id, position, kind, reason, epoch=epoch)
