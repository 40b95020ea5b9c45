"""What a test harness does to a host that no user command does, as public functions.

The contract kit (:mod:`plugins.testing`) drives hosts through the host's public API and these
functions only, never the ledger, the dispatcher or the store's tables: when those move, this
module moves with them and the kit (and every plugin's contract tests) stays as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa

from core import entry, ledger
from core.errors import NotFound
from core.store import tables

if TYPE_CHECKING:
    from core.host import Host
    from core.model import Step, Task

DEAD_EPOCH: Final = "harness-dead-epoch"
"""An epoch no live process holds: a marker under it reads as left behind by a crash."""


def write_declaration(
    host: Host, step_id: str, trigger: str, actions: Sequence[Mapping[str, Any]]
) -> None:
    """Store `actions` as the step's declaration for `trigger` as a sync would, without the
    workflow loader's validation (to test what dispatch does with a config it refuses)."""
    steps = tables.workflow_steps
    with host.store.transaction() as uow:
        stored = uow.conn.execute(
            sa.select(steps.c.events).where(steps.c.id == step_id)
        ).scalar_one_or_none()
        if stored is None:
            raise NotFound(f"no step {step_id!r}")
        events = json.loads(stored)
        events[trigger] = [dict(a) for a in actions]
        uow.conn.execute(
            sa.update(steps).where(steps.c.id == step_id).values(events=json.dumps(events))
        )


def crash_after_effect(host: Host, entry_id: str, kind: str, position: int = 0) -> None:
    """Leave an entry as a crash right after an action's effect leaves it: the action's
    marker back to in_progress under a dead epoch, the entry non-terminal."""
    markers, entries = tables.step_entry_markers, tables.step_entries
    with host.store.transaction() as uow:
        uow.conn.execute(
            sa.update(markers)
            .where(
                markers.c.entry_id == entry_id,
                markers.c.position == position,
                markers.c.kind == kind,
            )
            .values(state="in_progress", epoch=DEAD_EPOCH, reason=None, cause=None)
        )
        uow.conn.execute(sa.update(entries).where(entries.c.id == entry_id).values(terminal=False))


def replay_entry(host: Host, task: Task, step: Step, entry_id: str) -> None:
    """Resume a non-terminal entry as recovery does (durable positions only)."""
    with host.store.read() as conn:
        stored = ledger.load_entry(conn, entry_id)
    if stored is None:
        raise NotFound(f"no step entry {entry_id!r}")
    entry.redispatch(host, task, step, stored)


def snapshot(host: Host) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted: the database as it stands, to compare later."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with host.store.read() as conn:
        for table in tables.metadata.sorted_tables:
            rows = conn.execute(sa.select(table)).all()
            out[table.name] = sorted((tuple(r) for r in rows), key=repr)
    return out
