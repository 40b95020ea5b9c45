"""Owner-only files: a SQLite database and everything SQLite and laneway keep beside it.

The database holds agent profiles (their stored `--env` values may be API keys), task text,
transcripts and agent output; under the usual umask (022) every local user could read it.
SQLite creates its `-wal`, `-shm` and `-journal` files with the database file's own mode, so
creating the database owner-only (and tightening one made by an older laneway) covers them;
the ones already present are tightened too. The lock files laneway writes use `open_private`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

MODE: Final = 0o600
SIDE_SUFFIXES: Final = ("-wal", "-shm", "-journal")


def make_private(database: Path) -> None:
    """Create `database` empty and owner-only if it is missing, else make it (and the side
    files present) owner-only. Files owned by someone else are left as they are."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MODE))
    for path in (database, *(Path(f"{database}{s}") for s in SIDE_SUFFIXES)):
        _tighten(path)


def open_private(path: Path) -> int:
    """A descriptor for `path` opened for reading and appending, created owner-only."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, MODE)
    _tighten(path)
    return fd


def _tighten(path: Path) -> None:
    """Take group and other access away; the owner's own bits stay as the owner set them (a
    database its owner made read-only, 0400, is not made writable)."""
    with contextlib.suppress(OSError):
        info = path.stat()
        mode = info.st_mode & 0o777
        if info.st_uid == os.geteuid() and mode & 0o077:
            path.chmod(mode & 0o700)
