"""Text every database stores alike: no NUL (PostgreSQL refuses it), no lone surrogate
(nothing encodes it as UTF-8), and no longer than its column (SQLite would not say)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from core.errors import LanewayError

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


def check_text(value: str) -> str | None:
    """Why a string cannot be stored as text on every database, or None."""
    bad = _BAD_CHAR.search(value)
    if bad is None:
        return None
    if bad.group() == "\x00":
        return "contains a NUL character"
    return f"contains a lone surrogate (U+{ord(bad.group()):04X})"


def require_text(value: str, what: str, max_length: int | None = None) -> str:
    """`value`, or a LanewayError naming `what` and the problem."""
    problem = check_text(value)
    if problem is not None:
        raise LanewayError(f"{what}: {problem}")
    if max_length is not None and len(value) > max_length:
        raise LanewayError(f"{what}: longer than {max_length} characters ({len(value)})")
    return value


MAX_TEXT: Final = 16_000
"""The longest text a transcript item keeps, in characters."""
MAX_DATA: Final = 16_000
"""The longest data a transcript item keeps, as JSON characters."""


MAX_COMMENT: Final = 32_000
"""The longest comment body, and the longest comment of a verdict, in characters: a person's
longer one is refused; an agent's is cut to it and says so (its verdict still counts)."""


def cut_text(text: str, limit: int = MAX_TEXT) -> str:
    """`text`, or its first `limit` characters saying how many more were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [cut: {len(text) - limit} more characters]"


def cut_to(text: str, limit: int) -> str:
    """`text`, cut (saying so) so that it is at most `limit` characters long, note included."""
    if len(text) <= limit:
        return text
    return cut_text(text, limit - len(f"... [cut: {len(text)} more characters]"))


_FINITE_JSON = json.JSONEncoder(default=str, allow_nan=False).encode
"""`json.dumps(value, default=str, allow_nan=False)` without an encoder built per call (each
transcript item is measured by it; issue 45 item 2)."""
DATA_JSON = json.JSONEncoder(default=str).encode
"""`json.dumps(value, default=str)`, the stored JSON of an item's data, with one encoder."""


def stored_text(text: str) -> str:
    """`text` as every database can store it: NUL and lone surrogates replaced (U+FFFD). The
    common text, which holds neither, is returned without a copy."""
    if _BAD_CHAR.search(text) is None:
        return text
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _surely_within(data: Mapping[str, Any], limit: int) -> bool:
    """Whether `data`'s JSON is surely no longer than `limit` without encoding it: a flat
    mapping of text keys to text, whole numbers, booleans, None or finite floats, counted at
    their longest (a character is at most 12 in JSON, `\\ud83d\\ude00`). Anything else
    (nesting, a float that is not finite) is for the encoder to measure. An item's data is
    nearly always such a mapping: measured here, it is encoded once, not twice (issue 45
    item 2)."""
    if type(data) is not dict:
        return False
    size = 2
    for key, value in data.items():
        if type(key) is not str:
            return False
        kind = type(value)
        if kind is str:
            size += 12 * len(value) + 2
        elif kind is int:
            # a whole number's digits, without making its text: 2**64 has 20 of them
            size += 21 if -(2**64) < value < 2**64 else len(str(value))
        elif kind is float:
            if not math.isfinite(value):
                return False
            size += 24
        elif value is None or kind is bool:
            size += 5
        else:
            return False
        size += 12 * len(key) + 4
        if size > limit:
            return False
    return True


def bounded_data(data: Mapping[str, Any], limit: int = MAX_DATA) -> Mapping[str, Any]:
    """`data`, or, when its JSON is longer than `limit`, a stand-in that says it was cut
    (`{"cut": true, "chars": N, "preview": ...}`)."""
    if not data or _surely_within(data, limit):
        return data
    try:
        encoded = _FINITE_JSON(data)
    except ValueError:
        # Infinity and NaN are not JSON: kept as their names, so every reader can parse it
        data = finite_json(data)
        encoded = json.dumps(data, default=str)
    if len(encoded) <= limit:
        return data
    return {"cut": True, "chars": len(encoded), "preview": encoded[: limit // 2]}


def finite_json(value: Any) -> Any:
    """`value` with every float that is not finite (JSON has no such number) as its text:
    `"inf"`, `"-inf"`, `"nan"`."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value
