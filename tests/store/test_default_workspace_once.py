"""Two first openers of a board make one default workspace between them: each reads that there
is none and inserts one, so the read and the insert are one transaction's, ordered by an
advisory lock on PostgreSQL (under READ COMMITTED both used to read none and both insert: two
defaults, and `default_workspace()` taking either). Here the first opener is held between its
read and its insert while the second one runs."""

from __future__ import annotations

import threading
import types
from typing import Any

import pytest
import sqlalchemy as sa

from core import ids
from core.services import workspace
from core.store import tables as t
from tests.conftest import open_host

HELD_S = 60.0
SECOND_ALONE_S = 2.0
"""How long the second opener is given while the first is held (it cannot finish: it waits for
the first one's lock; before the fix it finished well within this)."""


def test_two_first_openers_make_one_default_workspace(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_host(db_url) as host:
        with host.store.transaction() as uow:
            uow.conn.execute(sa.delete(t.workspaces))  # a board as a first opener finds it

    choosing, go = threading.Event(), threading.Event()

    def new_id(*args: Any, **kwargs: Any) -> str:
        if threading.current_thread().name == "first":
            choosing.set()
            go.wait(HELD_S)
        return ids.new_id(*args, **kwargs)

    monkeypatch.setattr(workspace, "ids", types.SimpleNamespace(new_id=new_id, now=ids.now))

    def make_default() -> None:
        with open_host(db_url) as opener:
            opener.workspace.ensure_default()

    first = threading.Thread(target=make_default, name="first")
    second = threading.Thread(target=make_default, name="second")
    first.start()
    try:
        assert choosing.wait(HELD_S), "the first opener never chose its workspace's id"
        second.start()
        second.join(SECOND_ALONE_S)
    finally:
        go.set()
    first.join(HELD_S)
    second.join(HELD_S)
    assert not first.is_alive()
    assert not second.is_alive()
    with open_host(db_url) as host, host.store.read() as conn:
        defaults = conn.execute(
            sa.select(sa.func.count()).select_from(t.workspaces).where(t.workspaces.c.is_default)
        ).scalar()
    assert defaults == 1
