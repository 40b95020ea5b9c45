"""Errors a user can cause. The CLI prints their message as one line and exits 1.

Each class declares a stable `code` (snake_case, part of the HTTP and `--json` contracts: a
client branches on it, never on the wording) and the HTTP status serve answers it with.
"""

from __future__ import annotations

from typing import ClassVar


class LanewayError(Exception):
    """A user mistake or a refused operation; the message names what is wrong and where."""

    code: ClassVar[str] = "invalid"
    http_status: ClassVar[int] = 400

    def details(self) -> dict[str, object]:
        """Fields an answer carries beside `error` and `code` (a conflict's `paths`)."""
        return {}


class NotFound(LanewayError):
    code: ClassVar[str] = "not_found"
    http_status: ClassVar[int] = 404


class Conflict(LanewayError):
    code: ClassVar[str] = "conflict"
    http_status: ClassVar[int] = 409


class NotInitialised(LanewayError):
    """The database has no laneway schema yet (or this host may not do the thing asked).
    409: the request is sound but the store's state refuses it until `laneway init`."""

    code: ClassVar[str] = "not_initialised"
    http_status: ClassVar[int] = 409


class ValueRefused(LanewayError):
    """The database refused a value (too long, out of range, not storable text)."""

    code: ClassVar[str] = "value_refused"
    http_status: ClassVar[int] = 400


class DatabaseUnusable(LanewayError):
    """The database named cannot be used as it stands (a missing or read-only directory, a
    file that is not a database); the message says which and where. 503: nothing the request
    changes would make it succeed."""

    code: ClassVar[str] = "database_unusable"
    http_status: ClassVar[int] = 503


class DatabaseUrlRefused(LanewayError):
    """A database URL laneway cannot use as written (not a URL, an unsupported database, a
    missing driver): the same code as one SQLAlchemy cannot parse."""

    code: ClassVar[str] = "database_url"


class ReadOnly(LanewayError):
    """A write refused because this host or server was opened read-only (`--read-only`)."""

    code: ClassVar[str] = "read_only"
    http_status: ClassVar[int] = 403


class RunFenced(Conflict):
    """A write a run's outcome makes (its finish, a decision, a step signal, a transcript
    item) refused: the run's claim is no longer this process's epoch (`claim_lost`: it was
    declared dead and the run re-queued), or the entry that queued the run is no longer its
    task's current entry of the step (`superseded`). `reason` says which."""

    code: ClassVar[str] = "run_fenced"

    def __init__(self, run_id: str, reason: str) -> None:
        what = (
            "its claim was taken from this process"
            if reason == "claim_lost"
            else "the step entry that queued it is superseded"
        )
        super().__init__(f"run {run_id}: not recorded, {what}")
        self.run_id = run_id
        self.reason = reason
