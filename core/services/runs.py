from __future__ import annotations

import sqlalchemy as sa

from core.model import Run
from core.services.base import Service
from core.store import rows
from core.store import tables as t

R = t.runs


class RunService(Service):
    """The runs queue: agent work requested by workflow actions."""

    def list(self, *, task: str | None = None, status: str | None = None) -> list[Run]:
        query = sa.select(R).order_by(R.c.requested_at, R.c.id)
        if task is not None:
            query = query.where(R.c.task_id == self.host.tasks.get(task).id)
        if status is not None:
            query = query.where(R.c.status == status)
        with self.host.store.read() as conn:
            return [rows.run(r) for r in conn.execute(query).mappings()]
