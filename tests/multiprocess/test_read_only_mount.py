"""Issue 27 item 9: a read-only command reads a database on a read-only mount, and one its owner
made read-only (0400) in a writable directory.

A board is made on a small tmpfs, everything is closed, and the mount is remounted read-only.
The read commands (`task list`, `task show`, `workflow list`; docs/cli.md) then print the board
- SQLite cannot create the -shm file a WAL database is read through there, so laneway opens it
immutable (docs/operations.md "Epochs and liveness", on a read-only mount) - and a write
command fails with one line naming the file and the read-only mount, exit 1. Fails on the main
this branch started from (every read command: `database error: unable to open database file`).
The 0400 case landed before; its test here guards it from the command line.

SQLite only: the subject is a database file on a file system. Skipped, with the reason, where
a tmpfs cannot be mounted (not root, no `mount`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import open_host
from tests.multiprocess.conftest import Board


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs of the test's own, unmounted at the end whatever happened."""
    if not sys.platform.startswith("linux") or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs Linux and `mount`")
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / "mnt"
    point.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def _board(url: str) -> tuple[str, str]:
    with open_host(url) as host:
        wf = host.workflows.create_from_template("simple")
        task = host.tasks.create(workflow=wf.id, title="read me").id
    return wf.id, task


def test_item9_read_commands_read_a_database_on_a_read_only_mount(
    mount: Path, tmp_path: Path
) -> None:
    """Item 9: after `mount -o remount,ro`, `task list`, `task show` and `workflow list` print
    the board; `task create` fails with one line naming the file and the read-only mount."""
    database = mount / "board.db"
    url = f"sqlite:///{database}"
    workflow, task = _board(url)
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True, capture_output=True)
    board = Board(url, tmp_path)
    assert [t["id"] for t in board.json("task", "list")] == [task]
    assert board.json("task", "show", task)["title"] == "read me"
    assert [w["id"] for w in board.json("workflow", "list")] == [workflow]
    refused = board.run("task", "create", "--workflow", workflow, "--title", "no")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 1
    assert len(lines) == 1, refused.stderr
    assert str(database) in lines[0]
    assert "read-only mount" in lines[0]
    assert "Traceback" not in refused.stderr


def test_item9_read_commands_read_a_0400_database_in_a_writable_directory(
    tmp_path: Path,
) -> None:
    """Item 9: a database its owner set to 0400 is read by `task list`, and stays 0400."""
    database = tmp_path / "board.db"
    url = f"sqlite:///{database}"
    _workflow, task = _board(url)
    database.chmod(0o400)
    done = Board(url, tmp_path).run("--json", "task", "list")
    assert done.returncode == 0, done.stderr
    assert [t["id"] for t in json.loads(done.stdout)] == [task]
    assert stat.S_IMODE(database.stat().st_mode) == 0o400
