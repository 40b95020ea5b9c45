"""Identifiers and timestamps, in one place so every row is stamped the same way."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta

_VERSION_7 = 0x7 << 76
_VARIANT = 0b10 << 62
_RAND_A = 0xFFF << 64
_RAND_B = (1 << 62) - 1


def new_id() -> str:
    """A new row id: a UUIDv7 (RFC 9562) in the usual 36-character text form.

    The first 48 bits are the Unix time in milliseconds, so ids made later sort later and a
    new row's primary-key entry lands at the right edge of its index, on a page the previous
    insert already touched, instead of on a random leaf (uuid4): fewer pages written per
    commit on SQLite and PostgreSQL alike (issue 14). The other 74 bits (version and variant
    bits aside) are random, so ids made in the same millisecond, in any thread or process,
    are still unique. Nothing may read meaning into an id beyond that order.
    """
    value = (
        (time.time_ns() // 1_000_000) << 80
        | _VERSION_7
        | _VARIANT
        | (int.from_bytes(os.urandom(10)) & (_RAND_A | _RAND_B))
    )
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


_last_us = 0
_seconds: tuple[int, str] = (-1, "")
"""The last second stamped and its date-and-seconds text, replaced as one value."""
_lock = threading.Lock()
_SECONDS_FORMAT = "%Y-%m-%dT%H:%M:%S"


def now_micros() -> int:
    """The moment `now` would stamp, as integer Unix microseconds (strictly increasing within
    a process, shared with `now`): for a caller that also needs a moment relative to it
    (`at_micros`), with no text parsed back."""
    global _last_us
    with _lock:
        micros = time.time_ns() // 1_000
        if micros <= _last_us:
            micros = _last_us + 1
        _last_us = micros
    return micros


_window: tuple[int, str] = (-1, "")
"""The same for a moment before the clock's (a window's far end, `at_micros`)."""


def at_micros(micros: int) -> str:
    """`now`'s text form of a moment given in integer Unix microseconds."""
    global _seconds, _window
    second, fraction = divmod(micros, 1_000_000)
    cached, prefix = _seconds
    if second != cached:
        other, prefix = _window
        if second != other:
            prefix = datetime.fromtimestamp(second, UTC).strftime(_SECONDS_FORMAT)
            if second > cached:  # the clock's own second
                _seconds = (second, prefix)
            else:  # a window's far end (a run's idempotency window): remembered apart
                _window = (second, prefix)
    return f"{prefix}.{fraction:06d}Z"


def now() -> str:
    """UTC, ISO-8601 with microseconds: sorts correctly as text on every database.

    Strictly increasing within a process, so rows stamped one after another (a fan-out's runs)
    keep that order when sorted by time.
    """
    # Integer microseconds, and the date-and-seconds text made once per second: an arrival
    # stamps a dozen rows, and a datetime per stamp was a visible share of its CPU (issue 14).
    return at_micros(now_micros())


def format_ts(moment: datetime) -> str:
    """`%Y-%m-%dT%H:%M:%S.%fZ` of a UTC moment (isoformat: about half strftime's cost, and an
    arrival stamps a dozen rows)."""
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse(ts: str) -> datetime:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def shift(ts: str, seconds: float) -> str:
    """`ts` moved by `seconds` (negative: earlier), in the same text form."""
    return format_ts(parse(ts) + timedelta(seconds=seconds))
