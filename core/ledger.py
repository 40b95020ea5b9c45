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
from core.model import ActionDecl, Step, StepEntry
from core.registry import Registry
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
