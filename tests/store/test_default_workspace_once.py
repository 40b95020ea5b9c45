"""Two first openers of a board make one default workspace between them: each reads that there
is none and inserts one, so the read and the insert are one transaction's, ordered by an
advisory lock on PostgreSQL (under READ COMMITTED both used to read none and both insert: two
defaults, and `default_workspace()` taking either). Here the first opener is held between its
read and its insert while the second one runs."""

from __future__ import annotations

import types

import pytest
import sqlalchemy as sa

from core import ids
from core.services import workspace
from core.store import tables as t
from tests.conftest import open_host
from tests.interleave import Hold, race


def test_two_first_openers_make_one_default_workspace(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_host(db_url) as host:
        with host.store.transaction() as uow:
            uow.conn.execute(sa.delete(t.workspaces))  # a board as a first opener finds it

    hold = Hold()
    monkeypatch.setattr(
        workspace, "ids", types.SimpleNamespace(new_id=hold.before(ids.new_id), now=ids.now)
    )

    def make_default() -> None:
        with open_host(db_url) as opener:
            opener.workspace.ensure_default()

    race(hold, make_default, make_default)
    with open_host(db_url) as host, host.store.read() as conn:
        defaults = conn.execute(
            sa.select(sa.func.count()).select_from(t.workspaces).where(t.workspaces.c.is_default)
        ).scalar()
    assert defaults == 1
