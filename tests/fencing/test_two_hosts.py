"""Issue 27 item 7: a second `Host` opened in one process keeps the first host's SQLite locks.

The file check before opening (`sqlite_file_problem`) used to open and close the database file
to read its header, which drops every POSIX lock the process holds on it (one close releases
them all). Another process that then opened and closed the database took itself for the last
connection and deleted the `-wal` and `-shm` files under the first host, whose next write
failed with `disk I/O error`. Fails on the main this branch started from.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import open_host


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_item7_a_second_host_in_one_process_leaves_the_first_hosts_locks(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Item 7: host A writes; host B opens and closes in the same process; another process
    opens and closes the database; A's `-wal` is still there and A writes on."""
    path = tmp_path / "board.db"
    with open_host(sqlite_url) as a:
        wf = a.workflows.create_from_template("simple")
        a.tasks.create(workflow=wf.id, title="first")
        with open_host(sqlite_url) as b:
            assert [t.title for t in b.tasks.list()] == ["first"]
        code = (
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1])\n"
            "c.execute('SELECT count(*) FROM tasks').fetchone()\n"
            "c.close()\n"
        )
        subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
        assert Path(f"{path}-wal").exists()
        a.tasks.create(workflow=wf.id, title="second")
        assert sorted(t.title for t in a.tasks.list()) == ["first", "second"]
