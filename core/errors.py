"""Errors a user can cause. The CLI prints their message as one line and exits 1."""

from __future__ import annotations


class LanewayError(Exception):
    """A user mistake or a refused operation; the message names what is wrong and where."""


class NotFound(LanewayError):
    pass


class Conflict(LanewayError):
    pass


class NotInitialised(LanewayError):
    pass


class ValueRefused(LanewayError):
    """The database refused a value (too long, out of range, not storable text)."""


class DatabaseUnusable(LanewayError):
    """The database named cannot be used as it stands (a missing or read-only directory, a
    file that is not a database); the message says which and where."""
