"""Closing pending entries a batch at a time: the recovery scan's set-based form of
`ledger.skip_entry`, for entries that only need closing (their task left the step, or a newer
entry superseded them). Statements per batch, not per entry; the caller's one transaction:

1. On PostgreSQL the batch's task rows are held FOR SHARE (in id order) until COMMIT, so a move
   that would make an entry its task's occupancy again (a restore, which allocates no entry)
   waits for this transaction or has committed before the next statement reads. SQLite's
   writers are serialised already.
2. One conditional UPDATE sets terminal every entry of the batch that is still pending and
   still vacated (its task does not stand admitted at its step, or a newer entry exists),
   RETURNING the ids it set: those, and only those, are this batch's to close. An entry another
   scanner or a live worker finished first, or whose task came back, is not among them.
3. One INSERT ... ON CONFLICT DO NOTHING (executemany) writes skipped(reason) on every durable
   position of the closed entries, RETURNING the positions it wrote: each marker is written
   once, by whoever's insert lands. A position that already held a marker takes
   `ledger.skip_position`'s claim path, as an entry-level skip always did: terminal, left as
   it is; held by a dead epoch, re-claimed and settled; held by a live one, ClaimLost, and the
   caller's transaction rolls back whole.
4. The `entry.marker` events of the written positions, in (entry, position) order, exactly as
   `ledger.skip_entry` records them, stamped once for the batch.

On SQLite (one writer at a time, so the batch's transaction is alone from its first statement)
the batch goes to the database as one JSON parameter read by `json_each`, not thousands of
bound ones, and the statements do the per-entry work: the UPDATE's RETURNING is fetched whole;
the markers of every (entry, durable position) are one INSERT ... SELECT whose row count says
whether each was written (when not, the rows carrying this batch's stamp and epoch name those
that were); and when every one was written and no observer listens, their events are one
INSERT ... SELECT too, with `json_object` building the same compact JSON text the event log's
encoder writes (tests/on_enter/test_recovery_batch.py compares them). Measured at 100,000
pending among 1,000,000 (docs/performance.md, Recovery): this was most of the scan's Python.
PostgreSQL keeps the statements above (its JSON functions write other text).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core import ids, ledger
from core.model import ActionDecl, Step, StepEntry
from core.plugin.registry import Registry
from core.store import dialect, events
from core.store import tables as t
from core.store.database import UnitOfWork

E = t.step_entries
M = t.step_entry_markers
T = t.tasks

_BATCH_IDS: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)
_NEWER = E.alias("newer")
# The negation of ledger's occupancy test, correlated to the entry being updated.
_OCCUPIED = (
    sa.exists()
    .where(
        T.c.id == E.c.task_id,
        T.c.workflow_step_id == E.c.step_id,
        T.c.wip_admitted.is_(True),
        ~sa.exists()
        .where(
            _NEWER.c.task_id == E.c.task_id,
            _NEWER.c.step_id == E.c.step_id,
            _NEWER.c.entry_seq > E.c.entry_seq,
        )
        .correlate(E),
    )
    .correlate(E)
)
# "IS NOT true", not "IS false": the same on a NOT NULL flag, but SQLite cannot use it to read
# ix_step_entries_pending, which on a large board it would otherwise prefer to the primary key:
# every batch would scan all the pending entries left (measured: 0.2 ms per entry at 1,000,000).
_NOT_TERMINAL = E.c.terminal.is_not(True)
_CLOSE = (
    sa.update(E)
    .where(E.c.id.in_(_BATCH_IDS), _NOT_TERMINAL, ~_OCCUPIED)
    .values(terminal=True)
    .returning(E.c.id)
)
_STILL_PENDING = sa.select(E.c.id).where(E.c.id.in_(_BATCH_IDS), _NOT_TERMINAL)
_HOLD_TASKS = (
    sa.select(T.c.id).where(T.c.id.in_(_BATCH_IDS)).order_by(T.c.id).with_for_update(read=True)
)
# skipped(reason) at one (position, kind) for every entry of a list, as one conditional
# statement: ON CONFLICT DO NOTHING, so a position that holds a marker keeps it and two
# scanners inserting at once have one lose quietly; RETURNING names the rows written.
_MARKED = (
    sa.select(
        E.c.id,
        sa.bindparam("position", type_=sa.Integer),
        sa.bindparam("kind", type_=sa.String),
        sa.literal("skipped", type_=sa.String),
        sa.bindparam("epoch", type_=sa.String),
        sa.bindparam("reason", type_=sa.String),
        sa.bindparam("stamp", type_=sa.String),
    )
    .where(E.c.id.in_(_BATCH_IDS))
    .order_by(E.c.id)
)
_COLUMNS = ("entry_id", "position", "kind", "state", "epoch", "reason", "updated_at")
_WRITTEN = (M.c.entry_id, M.c.position, M.c.kind)
_SKIP_ABSENT: list[sa.Insert] = []


def _skip_absent() -> sa.Insert:
    """PostgreSQL's batch of skipped markers in its ON CONFLICT form, built on first use (a
    dialect's module costs a command about 40 ms to import; see `ledger._insert_absent`).
    SQLite's batch has its own statement (`_MARK_JSON`)."""
    if not _SKIP_ABSENT:
        built = (
            dialect.upsert_into("postgresql", M)
            .from_select(_COLUMNS, _MARKED)
            .on_conflict_do_nothing()
        )
        _SKIP_ABSENT.append(built.returning(*_WRITTEN))
    return _SKIP_ABSENT[0]


@attrs.frozen
class Closing:
    """A pending entry the scan found vacated, why, and the step whose declaration it has."""

    record: StepEntry
    reason: str
    step: Step


@attrs.frozen
class Outcome:
    closed: list[Closing]
    """Set terminal by this batch, every durable position terminal, in the order given."""
    pending: list[Closing]
    """Still pending but not vacated any more (the task is back at the step): the caller's to
    decide one by one, after this transaction."""


def close_entries(
    uow: UnitOfWork, registry: Registry, batch: Sequence[Closing], *, epoch: str
) -> Outcome:
    """Close `batch` (in its order) inside `uow`'s transaction; see the module docstring.
    Raises ledger.ClaimLost when a live epoch holds a position of a closed entry. Below is
    PostgreSQL's form; SQLite's is `_close_sqlite`."""
    if not batch:
        return Outcome([], [])
    if uow.store.is_sqlite:
        return _close_sqlite(uow, registry, batch, epoch)
    conn = uow.conn
    wanted = [c.record.id for c in batch]
    conn.execute(_HOLD_TASKS, {"ids": sorted({c.record.task_id for c in batch})}).all()
    set_terminal = {str(i) for i in conn.execute(_CLOSE, {"ids": wanted}).scalars()}
    closed, pending = _split(conn, batch, set_terminal)
    if not closed:
        return Outcome(closed, pending)
    stamp = ids.now()
    positions: dict[str, tuple[ActionDecl, ...]] = {}
    for c in closed:
        if c.step.id not in positions:
            positions[c.step.id] = ledger.durable_positions(registry, c.step.actions("on_enter"))
    # one statement per (step, reason, durable position): a handful per batch
    groups: dict[tuple[str, str], list[str]] = {}
    for c in closed:
        groups.setdefault((c.step.id, c.reason), []).append(c.record.id)
    insert = _skip_absent()
    written: set[tuple[str, int, str]] = set()
    for (step_id, reason), entry_ids in groups.items():
        for decl in positions[step_id]:
            values = {
                "ids": entry_ids,
                "position": decl.position,
                "kind": decl.kind,
                "epoch": epoch,
                "reason": reason,
                "stamp": stamp,
            }
            written.update((str(e), int(p), str(k)) for e, p, k in conn.execute(insert, values))
    keyed = {step: [(d.position, d.kind) for d in decls] for step, decls in positions.items()}
    _record(uow, closed, keyed, written, stamp, epoch)
    return Outcome(closed, pending)


# -- SQLite: the batch as one JSON parameter ----------------------------------------------------

_JSON_IDS = sa.select(
    sa.func.json_each(sa.bindparam("ids_json", type_=sa.String)).table_valued("value").c.value
).scalar_subquery()
_CLOSE_JSON = (
    sa.update(E)
    .where(E.c.id.in_(_JSON_IDS), _NOT_TERMINAL, ~_OCCUPIED)
    .values(terminal=True)
    .returning(E.c.id)
)
# :closed is [[task_id, entry_id, reason, [[position, kind], ...]], ...] in the batch's order;
# WHERE true: SQLite's parser needs a WHERE before ON CONFLICT in INSERT ... SELECT.
_MARK_JSON = sa.text(
    "INSERT INTO step_entry_markers (entry_id, position, kind, state, epoch, reason, updated_at) "
    "SELECT json_extract(c.value, '$[1]'), json_extract(p.value, '$[0]'), "
    "json_extract(p.value, '$[1]'), 'skipped', :epoch, json_extract(c.value, '$[2]'), :stamp "
    "FROM json_each(:closed) AS c, json_each(c.value, '$[3]') AS p WHERE true "
    "ORDER BY c.key, p.key ON CONFLICT DO NOTHING"
)
# Which of them this batch wrote, when the row count says some were not: a position's marker
# carries the batch's stamp (ids.now() never repeats in a process) and epoch only if the
# statement above wrote it, for no other writer ran in between (SQLite's write lock).
_MARKED_JSON = sa.text(
    "SELECT m.entry_id, m.position, m.kind FROM step_entry_markers AS m "
    "WHERE m.entry_id IN (SELECT json_extract(value, '$[1]') FROM json_each(:closed)) "
    "AND m.updated_at = :stamp AND m.epoch = :epoch AND m.state = 'skipped'"
)
# The markers' `entry.marker` events, in (entry, position) order: json_object writes the text
# `events._encode` writes for these fields (compact, keys in this order, ASCII ids and kinds).
_EVENTS_JSON = sa.text(
    "INSERT INTO board_events (type, task_id, at, data) "
    "SELECT 'entry.marker', json_extract(c.value, '$[0]'), :stamp, json_object("
    "'entry_id', json_extract(c.value, '$[1]'), 'position', json_extract(p.value, '$[0]'), "
    "'kind', json_extract(p.value, '$[1]'), 'state', 'skipped', "
    "'reason', json_extract(c.value, '$[2]')) "
    "FROM json_each(:closed) AS c, json_each(c.value, '$[3]') AS p ORDER BY c.key, p.key"
)


def _close_sqlite(
    uow: UnitOfWork, registry: Registry, batch: Sequence[Closing], epoch: str
) -> Outcome:
    conn = uow.conn
    wanted = json.dumps([c.record.id for c in batch])
    set_terminal = {str(i) for (i,) in conn.execute(_CLOSE_JSON, {"ids_json": wanted}).all()}
    closed, pending = _split(conn, batch, set_terminal)
    if not closed:
        return Outcome(closed, pending)
    stamp = ids.now()
    positions: dict[str, list[tuple[int, str]]] = {}
    for c in closed:
        if c.step.id not in positions:
            durable = ledger.durable_positions(registry, c.step.actions("on_enter"))
            positions[c.step.id] = [(d.position, d.kind) for d in durable]
    rows = [[c.record.task_id, c.record.id, c.reason, positions[c.step.id]] for c in closed]
    closed_json = json.dumps(rows)
    expected = sum(len(r[3]) for r in rows)
    params = {"closed": closed_json, "epoch": epoch, "stamp": stamp}
    count = conn.execute(_MARK_JSON, params).rowcount
    observer = uow.store.observer
    if count == expected and not uow.events and (observer is None or not observer.wanted()):
        conn.execute(_EVENTS_JSON, params)
        return Outcome(closed, pending)
    if count == expected:
        written = None
    else:
        written = {(str(e), int(p), str(k)) for e, p, k in conn.execute(_MARKED_JSON, params)}
    _record(uow, closed, positions, written, stamp, epoch)
    return Outcome(closed, pending)


def _record(
    uow: UnitOfWork,
    closed: Sequence[Closing],
    positions: dict[str, list[tuple[int, str]]],
    written: set[tuple[str, int, str]] | None,
    stamp: str,
    epoch: str,
) -> None:
    """Per closed entry and durable position, in order: the `entry.marker` event of a marker
    the batch wrote (`written`; None: all of them), else the ledger's claim path for the
    position that already held one."""
    for c in closed:
        entry_id = c.record.id
        for position, kind in positions[c.step.id]:
            if written is None or (entry_id, position, kind) in written:
                events.marker_known(
                    uow, stamp, c.record.task_id, entry_id, position, kind, "skipped", c.reason
                )
            else:
                ledger.skip_position(uow, entry_id, position, kind, c.reason, epoch=epoch)


def _split(
    conn: Connection, batch: Sequence[Closing], set_terminal: set[str]
) -> tuple[list[Closing], list[Closing]]:
    """The batch's entries the closing statement set terminal, and those it left that are still
    pending (their task is back at the step: the caller decides them); the rest another
    process closed meanwhile."""
    closed = [c for c in batch if c.record.id in set_terminal]
    pending: list[Closing] = []
    if len(closed) < len(batch):
        rest = [c.record.id for c in batch if c.record.id not in set_terminal]
        left = {str(i) for i in conn.execute(_STILL_PENDING, {"ids": rest}).scalars()}
        pending = [c for c in batch if c.record.id in left]
    return closed, pending
