"""Issue 27 items 2 and 3 on SQLite, in process.

- Item 2: SQLite's write lock held by another connection past `busy_timeout` is waited out by
  a worker with one WARNING (main: the worker raised `database is locked` and stopped).
- Item 3: the database file deleted or replaced under a running process is noticed by the
  inode check before its next write: the process stops writing with one ERROR, and the write
  fails with a one-line error instead of landing in the unlinked file (main: writes went on,
  into the deleted file, and nothing said so).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.agents import worker
from core.errors import DatabaseUnusable
from core.runs import RunRequest
from core.store import dialect
from tests.conftest import open_host


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_item2_a_sqlite_lock_held_past_busy_timeout_is_waited_out(
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    laneway_logs: list[dict[str, Any]],
) -> None:
    """Item 2: another connection holds the write lock for longer than busy_timeout (cut to
    0.1 s here); the worker waits, says so once, and claims and finishes the run after."""
    monkeypatch.setattr(dialect, "BUSY_TIMEOUT_MS", 100)
    path = tmp_path / "board.db"
    with open_host(sqlite_url) as host:
        wf = host.workflows.create_from_template("simple")
        agent = host.profiles.add("a", command=["true"]).id
        task = host.tasks.create(workflow=wf.id, title="t").id
        step = host.tasks.get(task).workflow_step_id
        run = host.runs.enqueue(RunRequest(agent, task, step, "t", coalesce_exempt=True)).run_id
        blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
        blocker.execute("BEGIN IMMEDIATE")
        result: list[Any] = []
        working = threading.Thread(
            target=lambda: result.append(worker.work(host, once=True)), daemon=True
        )
        working.start()
        deadline = time.monotonic() + 30
        while not [r for r in laneway_logs if r["message"].startswith("database unavailable")]:
            assert time.monotonic() < deadline, "the worker never met the lock"
            time.sleep(0.05)
        blocker.execute("COMMIT")
        blocker.close()
        working.join(30)
        assert not working.is_alive()
        assert result[0].as_dict() == {"claimed": 1, "finished": 1, "failed": 0}
        assert host.runs.get(run).status == "finished"
    waits = [r for r in laneway_logs if r["message"].startswith("database unavailable")]
    assert len(waits) == 1
    assert waits[0]["level"] == "WARNING"


def test_item3_a_database_file_deleted_under_a_running_process_stops_its_writes(
    sqlite_url: str, tmp_path: Path, laneway_logs: list[dict[str, Any]]
) -> None:
    """Item 3: the file is deleted (then, in a second host, replaced by a copy) under a live
    host: its next write fails with one line naming the file, one ERROR is logged however many
    writes follow, and nothing is written to the unlinked file."""
    path = tmp_path / "board.db"
    with open_host(sqlite_url) as host:
        wf = host.workflows.create_from_template("simple")
        host.tasks.create(workflow=wf.id, title="before")
        os.unlink(path)
        for title in ("after", "again"):
            with pytest.raises(DatabaseUnusable, match="deleted or replaced"):
                host.tasks.create(workflow=wf.id, title=title)
    errors = [r for r in laneway_logs if r["level"] == "ERROR" and "replaced" in r["message"]]
    assert len(errors) == 1
    assert errors[0]["extra"]["database"] == str(path)

    copy = tmp_path / "copy.db"
    other = f"sqlite:///{copy}"
    with open_host(other) as host:
        wf = host.workflows.create_from_template("simple")
        shutil.copyfile(copy, tmp_path / "swap.db")
        os.replace(tmp_path / "swap.db", copy)  # a new inode at the same name
        with pytest.raises(DatabaseUnusable, match="deleted or replaced"):
            host.tasks.create(workflow=wf.id, title="into the old file")
