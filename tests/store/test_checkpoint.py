"""Issue 14, target 2: SQLite's WAL checkpoint runs on a thread of the store's, not inside a
COMMIT (`core.store.checkpoint`).

The store's connections turn the automatic checkpoint off; its thread checkpoints the WAL at
about SQLite's own rate, so the committed pages reach the database file without any writer
waiting for the fsyncs; the thread ends when the store closes, and the last connection's close
checkpoints the rest.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import sqlalchemy as sa

from core.store import dialect, migrate
from core.store import tables as t
from core.store.database import Store

STAMP = "2026-01-01T00:00:00.000000Z"
PAGE = 4096


def _checkpoint_threads() -> list[threading.Thread]:
    return [th for th in threading.enumerate() if th.name == "laneway-checkpoint"]


def test_issue14_the_wal_is_checkpointed_off_the_commit_by_the_stores_thread(
    sqlite_url: str,
) -> None:
    """Issue 14: the writer connection's automatic checkpoint is off; after some 2,000 pages
    committed one page a transaction, the store's thread has copied them into the database
    file (its size grows past them) while the commits went on; closing the store ends the
    thread and leaves no WAL content behind."""
    path = dialect.sqlite_path(dialect.normalise_url(sqlite_url))
    assert path is not None
    store = Store(sqlite_url)
    try:
        migrate.upgrade(store)
        with store.transaction() as uow:
            assert uow.conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
            uow.conn.execute(sa.insert(t.workspaces).values(id="ws", name="ws", created_at=STAMP))
        size_before = path.stat().st_size
        # about a page of its own per row (SQLite does not enforce the column's length)
        payload = "x" * (PAGE - 200)
        for i in range(2000):
            with store.transaction() as uow:
                uow.conn.execute(
                    sa.insert(t.workspaces).values(id=f"w{i}", name=payload, created_at=STAMP)
                )
        assert _checkpoint_threads(), "the checkpoint thread never started"
        deadline = time.monotonic() + 30
        while path.stat().st_size < size_before + 1000 * PAGE:
            assert time.monotonic() < deadline, "the committed pages never reached the file"
            time.sleep(0.05)
    finally:
        store.close()
    assert _checkpoint_threads() == []
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert path.stat().st_size >= size_before + 2000 * PAGE
