"""Issue 45 item 3, the bad cases of SQLite's wake-up sockets (`core.store.wake`): a board path
too long for AF_UNIX, a hostile wake directory, nobody waiting. Two stores on one real board
file in this process, each as another process would have it (a socket per waiter, a sender per
store); the waiters wait a minute and report whether a wake-up ended the wait, so a wait the
fallback ended fails instead of passing slowly. The cross-process and crash cases are in
tests/multiprocess/test_sqlite_wake.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.logs import logger
from core.store import events, wake
from core.store.database import Store
from tests.conftest import open_host

WAIT_S = 60.0


@pytest.fixture
def warnings() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    handler = logger.add(
        lambda m: seen.append({"message": m.record["message"], **m.record["extra"]}),
        level="WARNING",
    )
    logger.enable("core")
    wake._warned.clear()
    try:
        yield seen
    finally:
        logger.remove(handler)


@pytest.fixture
def short() -> Iterator[Path]:
    """A directory with a path short enough for `<board.db>.wake/<socket>` beside the board
    (pytest's own, under xdist, can be too long)."""
    folder = Path(tempfile.mkdtemp(prefix="lw-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _board(path: Path) -> str:
    url = f"sqlite:///{path}"
    with open_host(url):
        pass  # migrated
    return url


def _commit(url: str) -> None:
    store = Store(url)
    try:
        with store.transaction() as uow:
            events.record(uow, "test.written", None)
    finally:
        store.close()


def test_issue_45_item_3_a_path_too_long_for_af_unix_wakes_through_a_private_directory(
    tmp_path: Path,
) -> None:
    """A board whose `<board.db>.wake/<socket>` would pass sun_path's 107 bytes keeps its
    sockets in /tmp/laneway-<uid>/<hash>.wake (the same for every process, closed to other
    users), and a commit still wakes the waiter."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    db = deep / "board.db"
    url = _board(db)
    where, private = wake.directory(db)
    assert private
    assert len(os.fsencode(f"{db}{wake.SUFFIX}/")) > wake.SUN_PATH_MAX - 24
    assert where.parent == Path(f"/tmp/laneway-{os.getuid()}")
    store = Store(url, read_only=True)
    commits = events.Commits(store)
    try:
        assert commits.listening
        assert stat.S_IMODE(where.parent.lstat().st_mode) == 0o700
        _commit(url)
        assert commits.wait(WAIT_S)
        assert commits.woken == 1
        assert not Path(f"{db}{wake.SUFFIX}").exists()
    finally:
        commits.close()
        store.close()
        with contextlib.suppress(OSError):
            where.rmdir()
    assert wake.directory(db) == (where, True)  # every process computes the same place


def test_issue_45_item_3_hostile_entries_are_ignored_and_never_followed(
    short: Path, warnings: list[dict[str, Any]]
) -> None:
    """Entries of the wake directory that are not sockets (a file, a FIFO, a symlink to a
    socket elsewhere, a dangling symlink) are neither sent to nor removed, and the waiter
    still wakes; a wake directory that is itself a symlink is not used: its waiters poll,
    with one warning however many there are."""
    url = _board(short / "board.db")
    assert not wake.directory(short / "board.db")[1]
    store = Store(url, read_only=True)
    commits = events.Commits(store)
    outside = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    outside.bind(str(short / "outside.sock"))
    outside.setblocking(False)
    try:
        where = wake.directory(short / "board.db")[0]
        assert stat.S_IMODE(where.lstat().st_mode) == 0o700  # owner-only, as the board is
        (where / "junk").write_text("not a socket")
        os.mkfifo(where / "fifo")
        (where / "link").symlink_to(short / "outside.sock")
        (where / "dangling").symlink_to(short / "nowhere.sock")
        _commit(url)
        assert commits.wait(WAIT_S)
        assert commits.woken == 1
        with pytest.raises(BlockingIOError):
            outside.recv(16)  # the symlink was not followed
        assert {p.name for p in where.iterdir()} >= {"junk", "fifo", "link", "dangling"}
    finally:
        commits.close()
        store.close()
        outside.close()
    assert warnings == []

    target = short / "elsewhere"
    target.mkdir()
    Path(f"{short / 'other.db'}{wake.SUFFIX}").symlink_to(target)
    other = _board(short / "other.db")
    stores = [Store(other, read_only=True) for _ in range(2)]
    waiting = [events.Commits(s) for s in stores]
    try:
        assert [c.listening for c in waiting] == [False, False]
        _commit(other)
        assert list(target.iterdir()) == []
    finally:
        for c, s in zip(waiting, stores, strict=True):
            c.close()
            s.close()
    assert len(warnings) == 1
    assert warnings[0]["directory"] == f"{short / 'other.db'}{wake.SUFFIX}"
    assert "NotADirectoryError" in warnings[0]["reason"]
