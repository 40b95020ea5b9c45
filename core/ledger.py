"""The entry ledger: entry identity, declaration digest, allocation.

An entry record is allocated inside the transition transaction, only when the landing step's
on_enter declaration has a durable kind (a kind nobody declares counts as durable, so that it
is marked `skipped(unrecognised)` rather than dropped). `entry_seq` is the next number for the
(task, step) pair; the UNIQUE constraint makes a racing second allocator lose.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from core import ids
from core.model import ActionDecl, Marker, Step, StepEntry
from core.registry import Registry
from core.store import rows
from core.store import tables as t
from core.store.database import UnitOfWork

E = t.step_entries


def declaration_digest(actions: tuple[ActionDecl, ...]) -> str:
    """SHA-256 over the ordered (position, kind) pairs; config is deliberately excluded."""
    text = "\n".join(f"{a.position}:{a.kind}" for a in actions)
    return hashlib.sha256(text.encode()).hexdigest()


def is_durable(registry: Registry, kind: str) -> bool:
    registered = registry.kind(kind)
    return registered is None or registered.kind.owner == "durable"


def durable_positions(registry: Registry, actions: tuple[ActionDecl, ...]) -> list[ActionDecl]:
    return [a for a in actions if is_durable(registry, a.kind)]


def allocate(
    uow: UnitOfWork, registry: Registry, task_id: str, step: Step, path: str
) -> StepEntry | None:
    actions = step.actions("on_enter")
    if not durable_positions(registry, actions):
        return None
    seq = uow.conn.execute(
        sa.select(sa.func.coalesce(sa.func.max(E.c.entry_seq), 0) + 1).where(
            E.c.task_id == task_id, E.c.step_id == step.id
        )
    ).scalar_one()
    entry = StepEntry(
        id=ids.new_id(),
        task_id=task_id,
        step_id=step.id,
        entry_seq=int(seq),
        entry_path=path,
        declaration_digest=declaration_digest(actions),
        terminal=False,
        created_at=ids.now(),
    )
    uow.conn.execute(
        sa.insert(E).values(
            id=entry.id,
            task_id=entry.task_id,
            step_id=entry.step_id,
            entry_seq=entry.entry_seq,
            entry_path=entry.entry_path,
            declaration_digest=entry.declaration_digest,
            terminal=False,
            created_at=entry.created_at,
        )
    )
    return entry


# -- markers ------------------------------------------------------------------------------------

M = t.step_entry_markers
TERMINAL = frozenset({"done", "skipped", "failed"})
_CAS = {"preserve_rowcount": True}  # PostgreSQL reports -1 for some statements otherwise


class ClaimLost(Exception):
    """A live peer (same epoch) holds the marker: the caller abandons the whole entry."""


def load_markers(conn: sa.Connection, entry_id: str) -> dict[tuple[int, str], Marker]:
    result = conn.execute(sa.select(M).where(M.c.entry_id == entry_id)).mappings()
    return {(r["position"], r["kind"]): rows.marker(r) for r in result}


def load_entry(conn: sa.Connection, entry_id: str) -> StepEntry | None:
    row = conn.execute(sa.select(E).where(E.c.id == entry_id)).mappings().first()
    return rows.entry(row) if row is not None else None


def claim(conn: sa.Connection, entry_id: str, position: int, kind: str, epoch: str) -> bool:
    """Compare-and-set the marker from absent (or stale in_progress) to in_progress(epoch).

    Returns False when the marker is already terminal (the position is done with); raises
    ClaimLost when a live peer of this process holds it. Runs inside the caller's transaction.
    """
    current = conn.execute(
        sa.select(M.c.state, M.c.epoch).where(
            M.c.entry_id == entry_id, M.c.position == position, M.c.kind == kind
        )
    ).first()
    stamp = ids.now()
    if current is None:
        try:
            with conn.begin_nested():
                conn.execute(
                    sa.insert(M).values(
                        entry_id=entry_id,
                        position=position,
                        kind=kind,
                        state="in_progress",
                        epoch=epoch,
                        updated_at=stamp,
                    )
                )
        except sa.exc.IntegrityError:
            raise ClaimLost from None
        return True
    state, holder = current
    if state in TERMINAL:
        return False
    if holder == epoch:
        raise ClaimLost
    # A different epoch's in_progress: its process is gone (one owner per database).
    taken = conn.execute(
        sa.update(M)
        .where(
            M.c.entry_id == entry_id,
            M.c.position == position,
            M.c.kind == kind,
            M.c.state == "in_progress",
            M.c.epoch == holder,
        )
        .values(epoch=epoch, updated_at=stamp)
        .execution_options(**_CAS)
    ).rowcount
    if taken != 1:
        raise ClaimLost
    return True


def settle(
    conn: sa.Connection,
    entry_id: str,
    position: int,
    kind: str,
    state: str,
    *,
    reason: str | None = None,
    cause: str | None = None,
) -> None:
    """Write a terminal marker (from absent or in_progress; a terminal one is left alone)."""
    stamp = ids.now()
    updated = conn.execute(
        sa.update(M)
        .where(
            M.c.entry_id == entry_id,
            M.c.position == position,
            M.c.kind == kind,
            M.c.state == "in_progress",
        )
        .values(state=state, reason=reason, cause=cause, updated_at=stamp)
        .execution_options(**_CAS)
    ).rowcount
    if updated == 0:
        exists = conn.execute(
            sa.select(M.c.state).where(
                M.c.entry_id == entry_id, M.c.position == position, M.c.kind == kind
            )
        ).first()
        if exists is None:
            conn.execute(
                sa.insert(M).values(
                    entry_id=entry_id,
                    position=position,
                    kind=kind,
                    state=state,
                    reason=reason,
                    cause=cause,
                    updated_at=stamp,
                )
            )


def set_terminal(conn: sa.Connection, entry_id: str) -> None:
    conn.execute(sa.update(E).where(E.c.id == entry_id).values(terminal=True))


def finish_if_complete(
    conn: sa.Connection, registry: Registry, entry_id: str, actions: tuple[ActionDecl, ...]
) -> bool:
    """Set the entry terminal when every durable position of `actions` holds a terminal
    marker (evaluated against the declaration as read now, per the spec)."""
    markers = load_markers(conn, entry_id)
    for decl in durable_positions(registry, actions):
        marker = markers.get((decl.position, decl.kind))
        if marker is None or marker.state not in TERMINAL:
            return False
    set_terminal(conn, entry_id)
    return True


def skip_entry(
    conn: sa.Connection,
    registry: Registry,
    entry_id: str,
    actions: tuple[ActionDecl, ...],
    reason: str,
) -> None:
    """An entry-level skip: every durable position without a terminal marker is marked
    skipped(reason), then the entry is set terminal."""
    markers = load_markers(conn, entry_id)
    for decl in durable_positions(registry, actions):
        marker = markers.get((decl.position, decl.kind))
        if marker is None or marker.state not in TERMINAL:
            settle(conn, entry_id, decl.position, decl.kind, "skipped", reason=reason)
    set_terminal(conn, entry_id)
