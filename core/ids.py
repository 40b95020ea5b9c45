"""Identifiers and timestamps, in one place so every row is stamped the same way."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime


def new_id() -> str:
    return str(uuid.uuid4())


def now() -> str:
    """UTC, ISO-8601 with microseconds: sorts correctly as text on every database."""
    return format_ts(datetime.now(UTC))


def format_ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(ts: str) -> datetime:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def shift(ts: str, seconds: float) -> str:
    """`ts` moved by `seconds` (negative: earlier), in the same text form."""
    from datetime import timedelta

    return (parse(ts) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
