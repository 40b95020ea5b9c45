"""A transcript item's bounds: its `text` to MAX_TEXT characters and its `data`, as JSON, to
MAX_DATA characters. A larger one is cut and says so (`... [cut: N more characters]` in the
text, `{"cut": true, "chars": N, "preview": ...}` as the data), so one chatty agent cannot make a
row, an event or the worker's memory as large as it likes.

Light on purpose (no ACP SDK): exec agents' items and the board's store are cut here too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from core.runtime.acp.values import ItemKind, TranscriptItem

MAX_TEXT: Final = 16_000
MAX_DATA: Final = 16_000


def cut_text(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [cut: {len(text) - limit} more characters]"


def bounded_data(data: Mapping[str, Any], limit: int = MAX_DATA) -> Mapping[str, Any]:
    encoded = json.dumps(data, default=str)
    if len(encoded) <= limit:
        return data
    return {"cut": True, "chars": len(encoded), "preview": encoded[: limit // 2]}


def item(kind: ItemKind, text: str = "", data: Mapping[str, Any] | None = None) -> TranscriptItem:
    """A transcript item cut to its bounds."""
    return TranscriptItem(kind, cut_text(text), bounded_data(data or {}))
