"""The entry ledger: entry identity, declaration digest, allocation.

An entry record is allocated inside the transition transaction, only when the landing step's
on_enter declaration has a durable kind (a kind nobody declares counts as durable, so that it
is marked `skipped(unrecognised)` rather than dropped). `entry_seq` is the next number for the
(task, step) pair; the UNIQUE constraint makes a racing second allocator lose.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa

from core import ids, memo
from core.model import ActionDecl, Marker, Step, StepEntry
from core.plugin.registry import Registry
from core.store import dialect, events, prepared, rows
from core.store import tables as t
from core.store.database import UnitOfWork

if TYPE_CHECKING:
    from sqlalchemy.dialects.postgresql import dml as pg_dml
    from sqlalchemy.dialects.sqlite import dml as sqlite_dml

E = t.step_entries

_ENTRY_KEYS = tuple(field.name for field in attrs.fields(StepEntry))


# The next entry_seq for the pair and the entry's insert as one statement, the number read
# back (RETURNING): one statement (on PostgreSQL one round trip) fewer per arrival than a
# read and then an insert. An aggregate without GROUP BY yields its one row even for the
# pair's first entry; a racing second allocator still loses on the UNIQUE constraint.
@functools.cache
def _allocate() -> sa.Insert:
    return (
        sa.insert(E)
        .from_select(
            list(_ENTRY_KEYS),
            sa.select(
                sa.bindparam("id", type_=E.c.id.type),
                sa.bindparam("task_id", type_=E.c.task_id.type),
                sa.bindparam("step_id", type_=E.c.step_id.type),
                sa.func.coalesce(sa.func.max(E.c.entry_seq), 0) + 1,
                sa.bindparam("entry_path", type_=E.c.entry_path.type),
                sa.bindparam("declaration_digest", type_=E.c.declaration_digest.type),
                sa.literal(False, E.c.terminal.type),
                sa.bindparam("created_at", type_=E.c.created_at.type),
                sa.bindparam("epoch", type_=E.c.epoch.type),
            ).where(
                E.c.task_id == sa.bindparam("task_id", type_=E.c.task_id.type),
                E.c.step_id == sa.bindparam("step_id", type_=E.c.step_id.type),
            ),
        )
        .returning(E.c.entry_seq)
    )


def _marker_key() -> sa.ColumnElement[bool]:
    """A marker by its key (entry, position, kind), as the statements below bind it."""
    markers = t.step_entry_markers
    return sa.and_(
        markers.c.entry_id == sa.bindparam("entry_id", type_=sa.String),
        markers.c.position == sa.bindparam("position", type_=sa.Integer),
        markers.c.kind == sa.bindparam("kind", type_=sa.String),
    )


# absent -> in_progress(epoch), as one conditional statement: rowcount 1 means claimed. ON
# CONFLICT DO NOTHING, not NOT EXISTS: two transactions inserting at once on PostgreSQL must
# have one lose quietly, not one fail on the primary key.
_CLAIM_VALUES = {
    "entry_id": sa.bindparam("entry_id", type_=sa.String),
    "position": sa.bindparam("position", type_=sa.Integer),
    "kind": sa.bindparam("kind", type_=sa.String),
    "state": "in_progress",
    "epoch": sa.bindparam("epoch", type_=sa.String),
    "updated_at": sa.bindparam("stamp", type_=sa.String),
}


@functools.cache
def _marker_state() -> sa.Select[Any]:
    markers = t.step_entry_markers
    return sa.select(markers.c.state, markers.c.epoch).where(_marker_key())


# absent -> skipped(reason) in one conditional statement, for an entry-level skip: rowcount 1
# means the position was free and is now closed; 0 sends the caller through claim and settle
# (terminal already, or held by an epoch whose liveness decides).
_SKIP_VALUES = {
    **_CLAIM_VALUES,
    "state": "skipped",
    "reason": sa.bindparam("reason", type_=sa.String),
}


@functools.cache
def _insert_absent(dialect: str, *, skip: bool) -> sa.Insert:
    """The claim (or, with `skip`, the skip) of an absent marker in `dialect`'s ON CONFLICT
    form, built on first use (`_insert_marker`)."""
    values = _SKIP_VALUES if skip else _CLAIM_VALUES
    return _insert_marker(dialect).values(values).on_conflict_do_nothing()


def _insert_marker(name: str) -> pg_dml.Insert | sqlite_dml.Insert:
    """`INSERT INTO step_entry_markers` in the dialect's own form, which has ON CONFLICT
    (`core.store.dialect.upsert_into`, which imports only that dialect's module)."""
    return dialect.upsert_into(name, t.step_entry_markers)


def _in_progress_under(epoch: str) -> sa.ColumnElement[bool]:
    """The marker by its key, in progress under the epoch bound as `epoch`."""
    markers = t.step_entry_markers
    return sa.and_(
        _marker_key(),
        markers.c.state == "in_progress",
        markers.c.epoch == sa.bindparam(epoch, type_=sa.String),
    )


@functools.cache
def _reclaim() -> sa.Update:
    """in_progress(dead epoch) -> in_progress(our epoch)"""
    markers = t.step_entry_markers
    return (
        sa.update(markers)
        .where(_in_progress_under("old_epoch"))
        .values(epoch=sa.bindparam("epoch"), updated_at=sa.bindparam("stamp"))
    )


@functools.cache
def _settle() -> sa.Update:
    """in_progress(our epoch) -> terminal: a marker re-claimed from us (we were declared dead)
    is no longer ours to settle"""
    markers = t.step_entry_markers
    return (
        sa.update(markers)
        .where(_in_progress_under("epoch"))
        .values(
            state=sa.bindparam("state"),
            reason=sa.bindparam("reason"),
            cause=sa.bindparam("cause"),
            updated_at=sa.bindparam("stamp"),
        )
    )


# The entry is still the task's current occupancy of its step: the task stands there admitted
# (a queued placement is no occupancy) and no newer entry exists for the pair. FOR UPDATE (a
# no-op on SQLite, whose writers are serialised) holds the task row until the caller's
# transaction commits, so no move can slip between this decision and the effect it guards.
@functools.cache
def _occupancy() -> sa.Select[Any]:
    newer = E.alias("newer")
    return (
        sa.select(t.tasks.c.id)
        .where(
            t.tasks.c.id == sa.bindparam("task_id", type_=sa.String),
            t.tasks.c.workflow_step_id == sa.bindparam("step_id", type_=sa.String),
            t.tasks.c.wip_admitted.is_(True),
            ~sa.exists().where(
                newer.c.task_id == sa.bindparam("task_id", type_=sa.String),
                newer.c.step_id == sa.bindparam("step_id", type_=sa.String),
                newer.c.entry_seq > sa.bindparam("entry_seq", type_=sa.Integer),
            ),
        )
        .with_for_update(key_share=True)
    )


# A transactional group's claims and its occupancy check as one statement: every member's
# marker is claimed from absent only while the entry is its task's current occupancy of its
# step (the task row then held, as `_occupancy` holds it). One statement (on PostgreSQL one
# round trip) instead of a claim per member and the check; see `claim_all_if_occupied`.
_CLAIM_KEYS = ["entry_id", "position", "kind", "state", "epoch", "updated_at"]


def _claim_row(n: int) -> Any:
    return sa.select(
        sa.bindparam("entry_id", type_=sa.String),
        sa.bindparam(f"position_{n}", type_=sa.Integer),
        sa.bindparam(f"kind_{n}", type_=sa.String),
        sa.literal("in_progress", sa.String),
        sa.bindparam("epoch", type_=sa.String),
        sa.bindparam("stamp", type_=sa.String),
    ).where(_occupancy().exists())


@functools.cache
def _claim_all_if_occupied(dialect: str, members: int) -> sa.Insert:
    rows: Any = _claim_row(0)
    if members > 1:
        rows = sa.union_all(*(_claim_row(n) for n in range(members)))
    return _insert_marker(dialect).from_select(_CLAIM_KEYS, rows).on_conflict_do_nothing()


@functools.cache
def _newest_seq() -> sa.Select[Any]:
    return sa.select(sa.func.max(E.c.entry_seq)).where(
        E.c.task_id == sa.bindparam("task_id", type_=sa.String),
        E.c.step_id == sa.bindparam("step_id", type_=sa.String),
    )


@functools.cache
def _set_terminal() -> sa.Update:
    return sa.update(E).where(E.c.id == sa.bindparam("b_entry_id")).values(terminal=True)


@memo.by_identity
def declaration_digest(actions: tuple[ActionDecl, ...]) -> str:
    """SHA-256 over the ordered (position, kind) pairs; config is deliberately excluded."""
    text = "\n".join(f"{a.position}:{a.kind}" for a in actions)
    return hashlib.sha256(text.encode()).hexdigest()


def is_durable(registry: Registry, kind: str) -> bool:
    registered = registry.kind(kind)
    return registered is None or registered.kind.owner == "durable"


@memo.by_identity
def durable_positions(
    registry: Registry, actions: tuple[ActionDecl, ...]
) -> tuple[ActionDecl, ...]:
    return tuple(a for a in actions if is_durable(registry, a.kind))


def allocate(
    uow: UnitOfWork, registry: Registry, task_id: str, step: Step, path: str
) -> StepEntry | None:
    actions = step.actions("on_enter")
    if not durable_positions(registry, actions):
        return None
    entry_id, stamp, digest = ids.new_id(), ids.now(), declaration_digest(actions)
    # the mover dispatches what it allocates: its epoch tells the recovery scan to keep off
    epoch = uow.store.liveness.own()
    seq = uow.run(
        _allocate(),
        {
            "id": entry_id,
            "task_id": task_id,
            "step_id": step.id,
            "entry_path": path,
            "declaration_digest": digest,
            "created_at": stamp,
            "epoch": epoch,
        },
    ).scalar_one()
    entry = StepEntry(
        id=entry_id,
        task_id=task_id,
        step_id=step.id,
        entry_seq=int(seq),
        entry_path=path,
        declaration_digest=digest,
        terminal=False,
        created_at=stamp,
        epoch=epoch,
    )
    events.know_entry(entry.id, task_id)
    return entry


# -- markers ------------------------------------------------------------------------------------

TERMINAL = frozenset({"done", "skipped", "failed"})


class ClaimLost(Exception):
    """A live epoch (a peer thread of this process, or another process) holds the marker, or
    re-claimed it from us: the caller abandons the whole entry, silently."""


def load_markers(conn: sa.Connection, entry_id: str) -> dict[tuple[int, str], Marker]:
    markers = t.step_entry_markers
    result = conn.execute(sa.select(markers).where(markers.c.entry_id == entry_id)).mappings()
    return {(r["position"], r["kind"]): rows.marker(r) for r in result}


def load_entry(conn: sa.Connection, entry_id: str) -> StepEntry | None:
    row = conn.execute(sa.select(E).where(E.c.id == entry_id)).mappings().first()
    return rows.entry(row) if row is not None else None


def claim(
    uow: UnitOfWork,
    entry_id: str,
    position: int,
    kind: str,
    epoch: str,
    *,
    settles_here: bool = False,
) -> bool:
    """Compare-and-set the marker from absent, or in_progress under a dead epoch, to
    in_progress(epoch).

    Returns False when the marker is already terminal (the position is done with); raises
    ClaimLost when a live epoch holds it, ours included (a peer thread). Runs inside the
    caller's transaction; each change is one conditional statement whose row count decides.

    :param settles_here: the caller settles the marker in this same transaction, or rolls
        it back (a transactional group): the claim never commits as a state of its own, so
        it records no `in_progress` event (the outbox would drop it at COMMIT anyway).
    """
    key = {"entry_id": entry_id, "position": position, "kind": kind}
    stamp = ids.now()
    absent = _insert_absent(uow.conn.dialect.name, skip=False)
    if uow.run(absent, {**key, "epoch": epoch, "stamp": stamp}).rowcount == 1:
        if not settles_here:
            events.marker(uow, entry_id, position, kind, "in_progress", None)
        return True
    current = uow.run(_marker_state(), key).first()
    if current is None:
        raise ClaimLost  # deleted under us: treat as contention, never as ours
    state, holder = tuple(current)
    if state in TERMINAL:
        return False
    if holder == epoch or not uow.store.liveness.is_dead(holder, uow.conn):
        raise ClaimLost
    # A dead epoch never comes back: naming it in the compare-and-set is safe.
    taken = uow.run(_reclaim(), {**key, "old_epoch": holder, "epoch": epoch, "stamp": stamp})
    if taken.rowcount != 1:
        raise ClaimLost
    if not settles_here:
        events.marker(uow, entry_id, position, kind, "in_progress", None)
    return True


def claim_all_if_occupied(
    uow: UnitOfWork, entry: StepEntry, positions: Sequence[tuple[int, str]], epoch: str
) -> int:
    """`claim` of every (position, kind) of `positions` from absent, in one statement with
    `vacated`'s check; returns how many it claimed. All of them: claimed, and `entry` is its
    task's current occupancy of its step (the task row held, as `vacated` holds it). None:
    nothing changed - the caller takes `claim` and `vacated`, which tell a vacated entry from
    a marker held already. Some: a marker was held already; the caller rolls back. For a
    caller that settles the markers in this same transaction (no `in_progress` event)."""
    values: dict[str, Any] = {
        "entry_id": entry.id,
        "epoch": epoch,
        "stamp": ids.now(),
        "task_id": entry.task_id,
        "step_id": entry.step_id,
        "entry_seq": entry.entry_seq,
    }
    for n, (position, kind) in enumerate(positions):
        values[f"position_{n}"] = position
        values[f"kind_{n}"] = kind
    statement = _claim_all_if_occupied(uow.conn.dialect.name, len(positions))
    return int(uow.run(statement, values).rowcount)


@functools.cache
def _unclaim() -> sa.Delete:
    return sa.delete(t.step_entry_markers).where(_in_progress_under("epoch"))


def unclaim(
    uow: UnitOfWork, entry_id: str, positions: Sequence[tuple[int, str]], epoch: str
) -> None:
    """Take back claims made in this transaction and not settled (a group that halted before
    reaching them): the transaction then commits no marker for them."""
    for position, kind in positions:
        uow.run(
            _unclaim(), {"entry_id": entry_id, "position": position, "kind": kind, "epoch": epoch}
        )


def holds(conn: sa.Connection, entry_id: str, position: int, kind: str, epoch: str) -> bool:
    """Whether the marker is still in progress under `epoch` (a claim not lost)."""
    current = conn.execute(
        _marker_state(), {"entry_id": entry_id, "position": position, "kind": kind}
    ).first()
    return current is not None and tuple(current) == ("in_progress", epoch)


def settle(
    uow: UnitOfWork,
    entry_id: str,
    position: int,
    kind: str,
    state: str,
    *,
    epoch: str,
    reason: str | None = None,
    cause: str | None = None,
    claimed_here: bool = False,
) -> None:
    """Write a terminal marker over our own claim. Raises ClaimLost when the marker is no
    longer ours (another process re-claimed it after declaring this epoch dead).

    :param claimed_here: the claim was made in this same transaction, so the marker is
        ours until it commits (no one can re-claim a claim that never committed: on
        PostgreSQL the row is new, or updated, and so locked by this transaction): its
        row count needs no check.
    """
    key = {"entry_id": entry_id, "position": position, "kind": kind}
    values = {"state": state, "reason": reason, "cause": cause, "stamp": ids.now()}
    # Nothing waits on the settle before the transaction's next statement: on PostgreSQL it
    # goes in one round trip with that statement (`prepared.defer`), its row count checked
    # there, inside this transaction, before anything commits. Unchecked (`claimed_here`),
    # it may also go in the COMMIT's round trip: a checked statement must be answered
    # before COMMIT is sent, a round trip of its own.
    check = None if claimed_here else _settled
    prepared.defer(uow.conn, _settle(), {**key, **values, "epoch": epoch}, check)
    events.marker(uow, entry_id, position, kind, state, reason)


def _settled(rowcount: int) -> None:
    if rowcount != 1:
        raise ClaimLost


def vacated(uow: UnitOfWork, entry: StepEntry) -> str | None:
    """None while `entry` is its task's current occupancy of its step (and, on PostgreSQL,
    the task row is then held until the caller commits); else why not: `superseded` when a
    newer entry exists for the pair, `step_left` otherwise. Call it in the transaction that
    commits the effect it guards."""
    values = {"task_id": entry.task_id, "step_id": entry.step_id, "entry_seq": entry.entry_seq}
    if uow.run(_occupancy(), values).first() is not None:
        return None
    newest = uow.run(_newest_seq(), values).scalar()
    return "superseded" if newest is not None and int(newest) > entry.entry_seq else "step_left"


def set_terminal(uow: UnitOfWork, entry_id: str) -> None:
    prepared.defer(uow.conn, _set_terminal(), {"b_entry_id": entry_id})


def finish_if_complete(
    uow: UnitOfWork, registry: Registry, entry_id: str, actions: tuple[ActionDecl, ...]
) -> bool:
    """Set the entry terminal when every durable position of `actions` holds a terminal
    marker (evaluated against the declaration as read now, per the spec)."""
    markers = load_markers(uow.conn, entry_id)
    for decl in durable_positions(registry, actions):
        marker = markers.get((decl.position, decl.kind))
        if marker is None or marker.state not in TERMINAL:
            return False
    set_terminal(uow, entry_id)
    return True


def skip_entry(
    uow: UnitOfWork,
    registry: Registry,
    entry_id: str,
    actions: tuple[ActionDecl, ...],
    reason: str,
    *,
    epoch: str,
) -> None:
    """An entry-level skip: every durable position without a terminal marker is claimed and
    marked skipped(reason), then the entry is set terminal. Raises ClaimLost (changing
    nothing, with the caller's transaction rolled back) when a live epoch holds a position.

    No read first: each position is closed by a conditional insert, and only a position that
    already holds a marker takes the claim path (terminal: left as it is; live: ClaimLost)."""
    for decl in durable_positions(registry, actions):
        skip_position(uow, entry_id, decl.position, decl.kind, reason, epoch=epoch)
    set_terminal(uow, entry_id)


def skip_position(
    uow: UnitOfWork, entry_id: str, position: int, kind: str, reason: str, *, epoch: str
) -> bool:
    """Claim and mark skipped(reason); False when the position was already terminal."""
    key = {"entry_id": entry_id, "position": position, "kind": kind}
    absent = _insert_absent(uow.conn.dialect.name, skip=True)
    if uow.run(absent, {**key, "epoch": epoch, "stamp": ids.now(), "reason": reason}).rowcount:
        events.marker(uow, entry_id, position, kind, "skipped", reason)
        return True
    if not claim(uow, entry_id, position, kind, epoch):
        return False
    settle(uow, entry_id, position, kind, "skipped", epoch=epoch, reason=reason)
    return True
