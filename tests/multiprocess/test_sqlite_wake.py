"""Issue 45 item 3: on SQLite a process learns of new board events from a wake-up socket
(`core.store.wake`), not a poll, and the wake-up survives processes that die holding it.

Real processes on a real board file: waiters (`events.Commits`, as `laneway watch` and a turn
waiting on a person use it) in processes of their own, writers in others. Each waiter waits
with a minute-long timeout and reports how many of its waits a wake-up ended and how many ran
out: a waiter that learned of an event by the fallback poll shows up as a timeout, not as a
slow test."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from core import faults
from core.store import events, wake
from tests.conftest import open_host

pytestmark = [pytest.mark.slow]

_WAITER = r"""
import json, sys
from core.store import events
from core.store.database import Store

store = Store(sys.argv[1], read_only=True)
commits = events.Commits(store)  # bound before the first read: nothing falls between
with store.read() as conn:
    last = events.latest_id(conn)
print(json.dumps({"ready": commits.listening}), flush=True)
timeouts = 0
while True:
    if not commits.wait(60.0):
        timeouts += 1
    with store.read() as conn:
        page = events.after(conn, last)
    if page:
        last = page[-1].id
        print(json.dumps({"ids": [e.id for e in page], "woken": commits.woken,
                          "timeouts": timeouts}), flush=True)
    if any(e.type == "test.end" for e in page):
        break
commits.close()
store.close()
"""

_WRITER = r"""
import sys
from core.store import events
from core.store.database import Store

store = Store(sys.argv[1])
with store.transaction() as uow:
    events.record(uow, "test.written", None)
"""


class _Waiter:
    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WAITER, url], stdout=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def next(self) -> dict[str, Any]:
        return self.lines.get(timeout=50)  # below the waiter's own 60 s fallback

    def seen_until(self, last: int) -> list[dict[str, Any]]:
        """The pages it reported until one holding event `last`."""
        pages = [self.next()]
        while last not in pages[-1]["ids"]:
            pages.append(self.next())
        return pages


def _record(url: str, type_: str) -> int:
    with open_host(url) as host:
        with host.store.transaction() as uow:
            events.record(uow, type_, None)
        with host.store.read() as conn:
            return events.latest_id(conn)


def _sockets(where: Path) -> set[str]:
    return {p.name for p in where.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)}


@pytest.mark.one_database
def test_issue_45_item_3_wake_up_survives_a_listener_and_a_writer_killed_mid_notify(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Three waiter processes wake on another process's commit by the socket (no timeout);
    then one is killed with -9 and a writer dies in the middle of its sends (the
    `wake.mid_notify` fault point, an `os._exit`): the others still wake, every event reaches
    every survivor once and in order, the dead listener's socket is removed by the next sender
    and nothing is left in the wake directory once the survivors end."""
    _record(sqlite_url, "test.before")  # migrated, and a commit with nobody waiting
    where = wake.directory(tmp_path / "board.db")[0]  # beside it, or /tmp's when too long
    assert not where.exists(), "a commit with nobody waiting made the wake directory"
    waiters = [_Waiter(sqlite_url) for _ in range(3)]
    try:
        assert [w.next() for w in waiters] == [{"ready": True}] * 3
        assert len(_sockets(where)) == 3

        first = _record(sqlite_url, "test.first")
        for w in waiters:
            pages = w.seen_until(first)
            assert [i for p in pages for i in p["ids"]] == [first]
            assert pages[-1]["woken"] >= 1
            assert pages[-1]["timeouts"] == 0

        dead = waiters.pop(0)
        dead.proc.send_signal(signal.SIGKILL)
        dead.proc.wait(30)
        assert len(_sockets(where)) == 3  # its socket stays behind: nobody reads it any more

        writer = subprocess.run(
            [sys.executable, "-c", _WRITER, sqlite_url],
            env={**os.environ, "LANEWAY_FAULT": "wake.mid_notify"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert writer.returncode == faults.EXIT_STATUS, writer.stderr
        with open_host(sqlite_url, read_only=True) as host:
            written = events.read_all(host.store)[-1]
        assert written.type == "test.written"  # committed: only its wake-ups were cut short

        end = _record(sqlite_url, "test.end")
        for w in waiters:
            pages = w.seen_until(end)
            assert [i for p in pages for i in p["ids"]] == [written.id, end]
            assert pages[-1]["timeouts"] == 0  # every wait was ended by a wake-up
            w.proc.wait(30)
            assert w.proc.returncode == 0
        # the dead listener's socket went with the first send refused; the survivors' with them
        assert _sockets(where) == set()
        assert list(where.iterdir()) == []
    finally:
        for w in waiters:
            w.proc.kill()
            w.proc.wait(30)


_READ_ONLY_WAITER = r"""
import json, sys
from core.logs import logger
from core.store import events
from core.store.database import Store

found = []
logger.add(lambda m: found.append(dict(m.record["extra"])), level="WARNING")
logger.enable("core")
store = Store(sys.argv[1], read_only=True)
waiting = [events.Commits(store) for _ in range(2)]
print(json.dumps({"listening": [c.listening for c in waiting],
                  "polled": [c.wait(0.01) for c in waiting], "warnings": found}), flush=True)
"""


@pytest.mark.one_database
def test_issue_45_item_3_a_read_only_wake_directory_leaves_waiters_polling() -> None:
    """A waiter that cannot bind in the wake directory (read-only to it: a read-only bind
    mount for root, who ignores modes; the mode otherwise) polls as before, with one
    structured warning however many waits it makes; a writer's commit still succeeds."""
    folder = Path(tempfile.mkdtemp(prefix="lw-", dir="/tmp"))  # short: the wake dir beside it
    try:
        _read_only_wake_directory(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _read_only_wake_directory(folder: Path) -> None:
    sqlite_url = f"sqlite:///{folder / 'board.db'}"
    _record(sqlite_url, "test.before")
    where, private = wake.directory(folder / "board.db")
    assert not private
    where.mkdir()
    if os.geteuid() == 0:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            pytest.skip("root ignores modes, and a read-only mount needs bwrap (bubblewrap)")
        prefix = [bwrap, "--dev-bind", "/", "/", "--ro-bind", str(where), str(where)]
    else:
        where.chmod(0o555)
        prefix = []
    child = subprocess.run(
        [*prefix, sys.executable, "-c", _READ_ONLY_WAITER, sqlite_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    where.chmod(0o755)
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    assert report["listening"] == [False, False]
    assert report["polled"] == [True, True]  # each wait a poll: "something may have changed"
    assert len(report["warnings"]) == 1
    assert report["warnings"][0]["directory"] == str(where)
    assert report["warnings"][0]["reason"].split(":")[0] in {"OSError", "PermissionError"}
    assert _record(sqlite_url, "test.after") > 0
    assert list(where.iterdir()) == []
