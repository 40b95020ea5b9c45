"""Identifiers and timestamps, in one place so every row is stamped the same way."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta


def new_id() -> str:
    return str(uuid.uuid4())


_last = datetime.min.replace(tzinfo=UTC)
_lock = threading.Lock()


def now() -> str:
    """UTC, ISO-8601 with microseconds: sorts correctly as text on every database.

    Strictly increasing within a process, so rows stamped one after another (a fan-out's runs)
    keep that order when sorted by time.
    """
    global _last
    with _lock:
        moment = datetime.now(UTC)
        if moment <= _last:
            moment = _last + timedelta(microseconds=1)
        _last = moment
    return format_ts(moment)


def format_ts(moment: datetime) -> str:
    """`%Y-%m-%dT%H:%M:%S.%fZ` of a UTC moment (isoformat: about half strftime's cost, and an
    arrival stamps a dozen rows)."""
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse(ts: str) -> datetime:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def shift(ts: str, seconds: float) -> str:
    """`ts` moved by `seconds` (negative: earlier), in the same text form."""
    return format_ts(parse(ts) + timedelta(seconds=seconds))
