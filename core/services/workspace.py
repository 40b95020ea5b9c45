from __future__ import annotations

from typing import TYPE_CHECKING, Final

import sqlalchemy as sa

from core import board, ids
from core.errors import NotFound
from core.model import Workspace
from core.services.base import Service
from core.services.refs import find_workflow
from core.store import rows
from core.store import tables as t

if TYPE_CHECKING:
    from core.store.database import Store

DEFAULT_NAME = "Default"
PG_DEFAULT_LOCK: Final = 0x6C6E7764666C74
"""The advisory lock two first openers of a PostgreSQL board take to make its default
workspace: under READ COMMITTED both would read none and insert one each (SQLite's writers
are serialised, the read inside the writing transaction)."""
_PG_DEFAULT = sa.text(f"SELECT pg_advisory_xact_lock({PG_DEFAULT_LOCK})")


class WorkspaceService(Service):
    """The default workspace. A task in its office workflow, or with a project, is Office's."""

    def ensure_default(self) -> None:
        if not self.peers.writable:
            return
        with self.peers.store.transaction() as uow:
            if uow.conn.dialect.name == "postgresql":
                uow.conn.execute(_PG_DEFAULT)
            found = uow.conn.execute(
                sa.select(t.workspaces.c.id).where(t.workspaces.c.is_default)
            ).first()
            if found is None:
                uow.conn.execute(
                    sa.insert(t.workspaces).values(
                        id=ids.new_id(), name=DEFAULT_NAME, is_default=True, created_at=ids.now()
                    )
                )

    def get(self) -> Workspace:
        return default_workspace(self.peers.store)

    def by_id(self, workspace_id: str) -> Workspace:
        with self.peers.store.read() as conn:
            row = (
                conn.execute(sa.select(t.workspaces).where(t.workspaces.c.id == workspace_id))
                .mappings()
                .first()
            )
        if row is None:
            raise NotFound(f"no workspace {workspace_id!r}")
        return rows.workspace(row)

    def set(self, *, office_workflow: str | None = None, name: str | None = None) -> Workspace:
        self._require_writer()
        current = self.get()
        values: dict[str, str] = {}
        if name is not None:
            values["name"] = name
        if office_workflow is not None:
            values["office_workflow_id"] = find_workflow(self.peers, office_workflow).id
        if values:
            with self.peers.store.transaction() as uow:
                uow.conn.execute(
                    sa.update(t.workspaces).where(t.workspaces.c.id == current.id).values(**values)
                )
                board.bump(uow)
        return self.get()


def default_workspace(store: Store) -> Workspace:
    """The default workspace's row: `WorkspaceService.get`, and what the workflows read it by
    (they name no workspace service: the workspace names a workflow as its office one)."""
    with store.read() as conn:
        row = (
            conn.execute(sa.select(t.workspaces).where(t.workspaces.c.is_default))
            .mappings()
            .first()
        )
    if row is None:
        raise NotFound("no default workspace; run `laneway init`")
    return rows.workspace(row)
