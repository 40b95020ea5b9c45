"""Issue 27 item 9, the smaller holes: a database its owner set to 0400 is not made writable on
open, and an OSError of a full disk or a read-only mount reaches the user as one line
(`disk error: ...`), not `internal error: OSError [Errno 28]`. Both fail on the main this branch
started from (the file became 0600; the CLI printed an internal error)."""

from __future__ import annotations

import errno
import stat
from pathlib import Path

import pytest

from core import Host
from core.cli import app
from core.errors import DatabaseUnusable
from tests.conftest import open_host


def test_item9_a_read_only_database_keeps_its_mode_and_is_still_readable(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Item 9: chmod 0400 by its owner: a reader opens it and its mode stays 0400, and a
    writer's open does not make it 0600 either."""
    path = tmp_path / "board.db"
    with open_host(sqlite_url) as host:
        host.workflows.create_from_template("simple")
    path.chmod(0o400)
    reader = Host.open(sqlite_url, read_only=True, start_plugins=False)
    try:
        assert [w.name for w in reader.workflows.list()] != []
    finally:
        reader.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    # a writer: refused in one line (or, for root, whom the mode does not bind, let in); the
    # mode is the owner's either way
    refused: list[str] = []
    try:
        open_host(sqlite_url).close()
    except DatabaseUnusable as exc:
        refused.append(str(exc))
    assert all("read-only" in why for why in refused)
    assert stat.S_IMODE(path.stat().st_mode) == 0o400


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_item9_disk_errors_are_one_line_for_the_user(code: int) -> None:
    """Item 9: a full disk (ENOSPC) or a read-only mount (EROFS) where laneway writes its
    files is the machine's to fix: one line naming the error and the file."""
    exc = OSError(
        code, "No space left on device" if code == errno.ENOSPC else "Read-only file system"
    )
    exc.filename = "/boards/board.db.epochs/e.lock"
    message = app._user_message(exc)
    assert message is not None
    assert message.startswith("disk error: ")
    assert message.endswith(": /boards/board.db.epochs/e.lock")
    assert "internal error" not in message
