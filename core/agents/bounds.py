"""A transcript item as a protocol makes it: `core.model.TranscriptItem`, which cuts itself
to its bounds as it is made (MAX_TEXT characters of text, MAX_DATA of data as JSON).

Light on purpose (no ACP SDK): exec agents' items are made here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.agents.values import ItemKind, TranscriptItem
from core.text import MAX_DATA, MAX_TEXT, bounded_data, cut_text

__all__ = ["MAX_DATA", "MAX_TEXT", "bounded_data", "cut_text", "item"]


def item(kind: ItemKind, text: str = "", data: Mapping[str, Any] | None = None) -> TranscriptItem:
    """A transcript item (cut to its bounds by its own making)."""
    return TranscriptItem(kind, text, data)
