"""The startup recovery scan over non-terminal step entries (on-enter spec AC-B9).

Once per host open, before anything is served; no lease, no timeout. The pending index is read
in pages of BATCH entries (keyset pagination on (task_id, step_id, entry_seq), with the tasks
of a page read beside it), and entries that only need closing (a1, a2) close in one
transaction per run of them, by set-based conditional statements (core.recovery_close); the
others are decided one by one. Entries written after the scan began are not its to decide.
For each non-terminal entry, in (task_id, step_id, entry_seq) order:

- (e) task, step or declaration cannot be loaded: skipped(unresolvable), warned;
- (a1) the task no longer occupies the entry's step (it stands elsewhere, or is back there
  only queued because the step is full): skipped(step_left);
- (a2) a newer entry exists for the same (task, step): skipped(superseded);
- (b) a halting action (clear_decisions) failed: the entry is closed, not resumed;
- (d) the declaration changed: skipped(declaration_changed) (decided by the walk itself);
- otherwise it is re-dispatched from its first non-terminal position, re-claiming markers
  left in_progress by a dead epoch. Session kinds are never re-run.
- an entry whose dispatching epoch (`step_entries.epoch`, the mover's) is alive, or a position
  held in_progress by a live epoch (another process at work on it right now), is that
  process's: the entry is left to it, silently. Resuming one a dead epoch left first makes it
  ours by a compare-and-set on that column.
- (f) nothing here prevents the host from starting: a record that fails is logged at ERROR
  and left for the next start; a failing query is logged and the host opens anyway.

The report counts every skip by reason: an entry closed whole (step_left, superseded,
unresolvable, declaration_changed) counts once, and each position a re-dispatch marked
skipped (no_executor, unrecognised, malformed) counts once too, beside `redispatched`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import attrs
import sqlalchemy as sa

from core import entry, ids, ledger, logs, recovery_close
from core.errors import LanewayError
from core.kernel import HasKernel, Kernel, kernel_of
from core.logs import logger
from core.model import Marker, Step, StepEntry, Task
from core.store import dialect, rows
from core.store import tables as t
from core.store.database import UnitOfWork

E = t.step_entries
BATCH = 5000
"""Pending entries read (and, when they only need closing, closed) per transaction. Every closing
transaction rewrites the pages it touches (of step_entries, the markers, the events) and, on
SQLite, checkpoints the WAL at its COMMIT: fewer, larger batches write less. Measured with uuid4
entry ids (before ids became time-ordered), at 100,000 pending among 1,000,000 the scan wrote
2.1 GB with 2,000, 1.5 GB with 5,000 and 1.3 GB with 10,000 (docs/performance.md); a batch of
5,000 took under a second there, which bounds how long it holds the write lock (SQLite) or its
task rows (PostgreSQL)."""


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


SCAN_CACHE_KIB = 65_536
"""SQLite page cache of the writer connection while the scan runs (64 MiB; SQLite's default is 2
MB), put back after. A batch dirties a page of step_entries per pending entry or two, the
markers' and the events' pages: with 2 MB these were evicted mid-transaction and read back
(measured at 100,000 among 1,000,000, 2,000 per batch: 5.5 GB read and 2.4 GB written by the
scan with 2 MB, 1.6 GB and 2.1 GB with 64 MiB; docs/performance.md)."""


def scan(source: Kernel | HasKernel) -> RecoveryReport:
    host = kernel_of(source)  # the kernel; named as the bodies were written
    with _wide_cache(host):
        return _scan(host)


@contextmanager
def _wide_cache(host: Kernel) -> Iterator[None]:
    """SCAN_CACHE_KIB on SQLite's writer connection for the scan; a fixed size, reset after, so
    the host's memory stays bounded. PostgreSQL's buffers are the server's."""
    previous: int | None = None
    if host.store.is_sqlite:
        previous = _cache_size(
            host, -SCAN_CACHE_KIB, "recovery scan runs with the default page cache"
        )
    try:
        yield
    finally:
        if previous is not None:
            _cache_size(host, previous, "recovery scan could not put the page cache back")


def _cache_size(host: Kernel, value: int, failed: str) -> int | None:
    """Set the writer's page cache to `value`; the one it replaced, or None (logged as `failed`)
    when that failed: rule (f), the scan is only slower without it."""
    try:
        with host.store.write_connection() as conn:
            return dialect.sqlite_cache_size(conn, value)
    except Exception as exc:  # noqa: BLE001 - rule (f)
        logger.bind(cause=f"{type(exc).__name__}: {exc}").warning(failed)
        return None


def _scan(host: Kernel) -> RecoveryReport:
    skipped: Counter[str] = Counter()
    tally = _Tally()
    steps: dict[str, Step | None] = {}
    started = ids.now()
    after: tuple[str, str, int] | None = None
    while True:
        try:
            found, tasks = _next_batch(host, after, started)
        except Exception as exc:  # noqa: BLE001 - rule (f): the host opens whatever happens here
            logger.bind(cause=f"{type(exc).__name__}: {exc}").error(
                "recovery scan query failed; incomplete entries wait for the next start"
            )
            tally.errors += 1
            break
        if not found:
            break
        tally.scanned += len(found)
        last = found[-1][0]
        after = (last.task_id, last.step_id, last.entry_seq)
        _recover_batch(host, found, tasks, steps, skipped, tally)
    report = RecoveryReport(tally.scanned, tally.redispatched, dict(skipped), tally.errors)
    if tally.scanned:
        logger.bind(**report.as_dict()).info("recovery scan finished")
    return report


@attrs.define
class _Tally:
    scanned: int = 0
    redispatched: int = 0
    errors: int = 0


def _next_batch(
    host: Kernel, after: tuple[str, str, int] | None, started: str
) -> tuple[list[tuple[StepEntry, int]], dict[str, tuple[str | None, bool]]]:
    """The next BATCH pending entries after `after` in (task, step, seq) order, keyset-paged
    along the pending index, and where their tasks stand, read together. Entries written after
    the scan began are left out: a re-dispatch that moves a task on is not the scan's to redo."""
    query = pending_query()
    cols = query.selected_columns
    key = sa.tuple_(cols.task_id, cols.step_id, cols.entry_seq)
    query = query.where(cols.created_at <= started).limit(BATCH)
    if after is not None:
        query = query.where(key > sa.tuple_(*(sa.literal(v) for v in after)))
    with host.store.read() as conn:
        found = [(rows.entry(r), int(r["newest_seq"])) for r in conn.execute(query).mappings()]
        wanted = sorted({record.task_id for record, _newest in found})
        placed = conn.execute(
            sa.select(t.tasks.c.id, t.tasks.c.workflow_step_id, t.tasks.c.wip_admitted).where(
                t.tasks.c.id.in_(wanted)
            )
        ).all()
    return found, {str(i): (step, bool(admitted)) for i, step, admitted in placed}


def _recover_batch(
    host: Kernel,
    found: list[tuple[StepEntry, int]],
    tasks: dict[str, tuple[str | None, bool]],
    steps: dict[str, Step | None],
    skipped: Counter[str],
    tally: _Tally,
) -> None:
    """In order: runs of entries that only need closing (step_left, superseded) close in one
    transaction each; every other entry (a re-dispatch, a halted or unresolvable one) goes
    through `_recover_one` on its own, as does a run whose transaction failed."""
    closing: list[tuple[StepEntry, int, str, Step]] = []
    for record, newest in found:
        reason, step = _closing_reason(host, record, newest, tasks, steps)
        if reason and step is not None:
            closing.append((record, newest, reason, step))
            continue
        _close_run(host, closing, skipped, tally)
        closing = []
        _recover_guarded(host, record, newest, skipped, tally)
    _close_run(host, closing, skipped, tally)


def _closing_reason(
    host: Kernel,
    record: StepEntry,
    newest: int,
    tasks: dict[str, tuple[str | None, bool]],
    steps: dict[str, Step | None],
) -> tuple[str, Step | None]:
    """step_left or superseded (with the step) when the entry is only to be closed, else ""."""
    placed = tasks.get(record.task_id)
    if placed is None:
        return "", None  # gone: unresolvable, decided (and warned) by _recover_one
    if record.step_id not in steps:
        try:
            steps[record.step_id] = host.read.step(record.step_id)[1]
        except (LanewayError, ValueError, TypeError, KeyError):
            steps[record.step_id] = None
    step = steps[record.step_id]
    where, admitted = placed
    if step is None:
        return "", None
    if where != step.id or not admitted:
        return "step_left", step
    if record.entry_seq != newest:
        return "superseded", step
    return "", None


def _close_run(
    host: Kernel,
    closing: list[tuple[StepEntry, int, str, Step]],
    skipped: Counter[str],
    tally: _Tally,
) -> None:
    """Close a run of vacated entries in one transaction, set-based (core.recovery_close).
    An entry the batch did not close because its task came back goes through `_recover_one`
    after the commit; one another process closed first is not counted here."""
    if not closing:
        return
    registry = host.bundle().registry
    batch = [recovery_close.Closing(record, reason, step) for record, _n, reason, step in closing]
    try:
        with host.store.transaction() as uow:
            outcome = recovery_close.close_entries(uow, registry, batch, epoch=host.live_epoch())
    except Exception:  # noqa: BLE001 - contention or a bad record: decide each one alone
        for record, newest, _reason, _step in closing:
            _recover_guarded(host, record, newest, skipped, tally)
        return
    tell = _info_wanted()
    for closed in outcome.closed:
        skipped[closed.reason] += 1
        if tell:
            record = closed.record
            logger.bind(
                task_id=record.task_id,
                step_id=record.step_id,
                entry_seq=record.entry_seq,
                reason=closed.reason,
            ).info("entry closed without running")
    newest_of = {record.id: newest for record, newest, _reason, _step in closing}
    for back in outcome.pending:
        _recover_guarded(host, back.record, newest_of[back.record.id], skipped, tally)


def _info_wanted() -> bool:
    """Whether any loguru handler takes INFO records: when none does (a host logs at WARNING
    unless told otherwise), the record per closed entry is not built at all, a bind and a
    dispatch per entry that was a tenth of the scan's Python."""
    return logs.wanted(_INFO)


_INFO = 20  # loguru's INFO, known without importing loguru (core.logs)


def _recover_guarded(
    host: Kernel, record: StepEntry, newest: int, skipped: Counter[str], tally: _Tally
) -> None:
    try:
        outcome = _recover_one(host, record, newest, skipped)
    except ledger.ClaimLost:
        return  # a live process is working this entry
    except Exception as exc:  # noqa: BLE001 - rule (f): one bad record never stops the rest
        tally.errors += 1
        logger.bind(
            task_id=record.task_id,
            step_id=record.step_id,
            entry_seq=record.entry_seq,
            cause=f"{type(exc).__name__}: {exc}",
        ).error("recovery could not process an entry; it stays pending for the next start")
        return
    if outcome == "redispatched":
        tally.redispatched += 1
    elif outcome is not None:
        skipped[outcome] += 1


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
    if not _take_over(host, record):
        return None  # its dispatcher lives: the entry is that process's, silently
    end = entry.redispatch(host, task, step, record)
    if end == "declaration_changed":
        return end
    _count_position_skips(host, record.id, markers, skipped)
    return "redispatched"


_TAKE_OVER = (
    sa.update(E)
    .where(E.c.id == sa.bindparam("b_id"), E.c.terminal.is_not(True))
    .values(epoch=sa.bindparam("b_epoch"))
)


def _take_over(host: Kernel, record: StepEntry) -> bool:
    """Whether this process may resume `record`: only when the epoch dispatching it is dead
    (CLI.md: the scan "resumes only what dead epochs left"), then made ours by one
    compare-and-set naming the dead epoch, so of two scans at once one resumes it."""
    if not host.store.liveness.is_dead(record.epoch):
        return False
    held = E.c.epoch.is_(None) if record.epoch is None else E.c.epoch == record.epoch
    with host.store.transaction() as uow:
        taken = uow.conn.execute(
            _TAKE_OVER.where(held), {"b_id": record.id, "b_epoch": host.live_epoch()}
        ).rowcount
    return taken == 1


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
