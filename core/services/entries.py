from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.model import Marker, StepEntry
from core.services.base import Lazy, Service
from core.store import rows
from core.store import tables as t

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.tasks import TaskService

E = t.step_entries


class EntryService(Service):
    """The entry ledger, read side, and the recovery scan."""

    def __init__(self, peers: Peers, *, tasks: Lazy[TaskService]) -> None:
        super().__init__(peers)
        self._tasks = tasks

    def list(
        self, *, task: str | None = None, non_terminal: bool = False
    ) -> list[tuple[StepEntry, list[Marker]]]:
        query = sa.select(E).order_by(E.c.task_id, E.c.step_id, E.c.entry_seq)
        if task is not None:
            query = query.where(E.c.task_id == self._tasks().get(task).id)
        if non_terminal:
            query = query.where(E.c.terminal.is_(False))
        with self.peers.store.read() as conn:
            entries = [rows.entry(r) for r in conn.execute(query).mappings()]
            markers: dict[str, list[Marker]] = {e.id: [] for e in entries}
            if entries:
                table = t.step_entry_markers
                found = conn.execute(
                    sa.select(table)
                    .where(table.c.entry_id.in_(list(markers)))
                    .order_by(table.c.entry_id, table.c.position)
                ).mappings()
                for r in found:
                    markers[r["entry_id"]].append(rows.marker(r))
        return [(e, markers[e.id]) for e in entries]

    def recover(self) -> Any:
        """The recovery scan (core.recovery). Every writer runs it when it opens, and almost
        always nothing is pending: one probe of the pending index answers that, and the scan's
        own queries (a correlated subquery, the tasks of each page) are built and run only
        when something is."""
        from core import recovery

        if not self._anything_pending():
            return recovery.RecoveryReport()
        return recovery.scan(self.peers)

    def _anything_pending(self) -> bool:
        try:
            with self.peers.store.read() as conn:
                return anything_pending(conn)
        except Exception:  # noqa: BLE001 - the scan itself reports a failing query (rule f)
            return True


def anything_pending(conn: Connection) -> bool:
    """The recovery scan's probe of the pending index (a host's opening runs it in its first
    read); it raises what the read raises."""
    probe = sa.select(sa.literal(1)).where(sa.exists().where(E.c.terminal.is_(False)))
    return conn.execute(probe).first() is not None
