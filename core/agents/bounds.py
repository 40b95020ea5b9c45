"""A transcript item cut to its bounds (`core.text.cut_text` / `bounded_data`: MAX_TEXT
characters of text, MAX_DATA of data as JSON; a larger one is cut and says so), so one chatty
agent cannot make a row, an event or the worker's memory as large as it likes.

Light on purpose (no ACP SDK): exec agents' items are made here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.agents.values import ItemKind, TranscriptItem
from core.text import MAX_DATA, MAX_TEXT, bounded_data, cut_text

__all__ = ["MAX_DATA", "MAX_TEXT", "bounded_data", "cut_text", "item"]


def item(kind: ItemKind, text: str = "", data: Mapping[str, Any] | None = None) -> TranscriptItem:
    """A transcript item cut to its bounds."""
    return TranscriptItem(kind, cut_text(text), bounded_data(data or {}))
