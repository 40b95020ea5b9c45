"""How a command's failure reads: one line for the user (`CommandFailed`: `laneway: ...`, or
`{"error": ..., "code": ...}` with `--json`), which exceptions are the user's to fix and what
they say (`user_message`), and their `--json` code (`code_of`)."""

from __future__ import annotations

import errno
import json
import re
import sys
from typing import IO, Any

import click


def one_line(message: str) -> str:
    return re.sub(r"\s*[\r\n]+\s*", " ", message).strip()


class CommandFailed(click.ClickException):
    """A command ended on an error the user should read: `laneway: <message>`, exit 1; with
    `--json`, one JSON object `{"error": "<message>", "code": "<code>"}` instead (CLI.md;
    `code` is the LanewayError's stable code, "internal" for a fault that is not the user's)."""

    exit_code = 1
    as_json = False

    def __init__(
        self, message: str, code: str = "invalid", extra: dict[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra or {}

    def show(self, file: IO[Any] | None = None) -> None:
        if self.as_json:
            text = json.dumps(
                {**self.extra, "error": one_line(self.message), "code": self.code},
                ensure_ascii=False,
            )
        else:
            text = f"laneway: {one_line(self.message)}"
        click.echo(text, err=True, file=file)


USER_ERRORS = (("core.errors", "LanewayError"),)
"""Exceptions whose message is meant for the user as it stands: (module, class). An exception
of a class can only exist once its module is imported, so none is imported to test for it."""


def code_of(exc: Exception) -> str:
    """The `--json` code of a user error `user_message` accepted: its class's, or for a
    database the driver refused, "database_url" (malformed URL) or "unavailable"."""
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(exc, sa_exc.SQLAlchemyError):
        # SQLAlchemy's errors carry a `code` of their own (a link to its docs, "e3q8"), not ours
        if isinstance(exc, sa_exc.ArgumentError):
            return "database_url"
        if isinstance(exc, sa_exc.DatabaseError) and _damaged(exc):
            return "database_unusable"  # as `DatabaseUnusable`: the file is no sound database
        return "unavailable"
    code = getattr(type(exc), "code", None)
    if isinstance(code, str):
        return code
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        return "bad_request"
    return "unavailable"


def _damaged(exc: Exception) -> bool:
    """Whether the driver says the database file is not a sound database (SQLite)."""
    text = str(getattr(exc, "orig", None) or exc)
    return "malformed" in text or "not a database" in text


DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def user_message(exc: Exception) -> str | None:
    """The one line a user should read for `exc`, or None: not the user's to fix."""
    for module, name in USER_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return str(exc)
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        # a full disk or a read-only mount where laneway keeps its files: the machine's to fix
        where = f": {exc.filename}" if exc.filename else ""
        return f"disk error: {exc.strerror or exc}{where}"
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        # a path the user gave (a database file, a repository) longer than the system allows
        name = str(exc.filename or "")
        shown = f"{name[:60]}... ({len(name)} characters)" if len(name) > 80 else name
        return f"file name too long: {shown}"
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None:
        if isinstance(exc, sa_exc.ArgumentError):
            # A malformed --db URL or a missing database driver: the user's to fix.
            return f"database URL: {exc}"
        if isinstance(exc, sa_exc.OperationalError):
            # The database is unreachable or refuses us: an environment problem, not a bug.
            return f"database error: {exc.orig or exc}"
        if isinstance(exc, sa_exc.DatabaseError) and _damaged(exc):
            # a damaged file (cut short, overwritten): restore it from a backup
            return f"database damaged: {exc.orig or exc}; restore it from a backup"
    return None
