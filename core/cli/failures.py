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
    code = getattr(type(exc), "code", None)
    if isinstance(code, str):
        return code
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(exc, sa_exc.ArgumentError):
        return "database_url"
    return "unavailable"


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
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None:
        if isinstance(exc, sa_exc.ArgumentError):
            # A malformed --db URL or a missing database driver: the user's to fix.
            return f"database URL: {exc}"
        if isinstance(exc, sa_exc.OperationalError):
            # The database is unreachable or refuses us: an environment problem, not a bug.
            return f"database error: {exc.orig or exc}"
    return None
