"""`session/update` notifications as transcript items (CLI.md: `kind`, `text`, `data`).

An item is bounded: its `text` to MAX_TEXT characters and its `data`, as JSON, to MAX_DATA
characters. A larger one is cut and says so (`... [cut: N more characters]` in the text,
`{"cut": true, "chars": N, "preview": ...}` as the data), so one chatty agent cannot make a
row, an event or the worker's memory as large as it likes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from acp.schema import (
    AgentPlanUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    UsageUpdate,
)
from pydantic import BaseModel

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


def dump(model: BaseModel) -> dict[str, Any]:
    """A schema value as the JSON the agent sent (camelCase keys, nothing unset)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def block_text(block: Any) -> str:
    """The text of a content block; other blocks (images, resources) are named, not inlined."""
    if isinstance(block, TextContentBlock):
        return block.text
    kind = getattr(block, "type", "content")
    return f"[{kind}]"


def update_item(update: Any) -> TranscriptItem | None:
    """The item of an update that is not a message or thought chunk; None: not transcript."""
    if isinstance(update, ToolCallStart | ToolCallProgress):
        data = dump(update)
        data.pop("sessionUpdate", None)
        title = update.title or ""
        status = update.status or ""
        return item("tool_call", " ".join(p for p in (title, status) if p), data)
    if isinstance(update, AgentPlanUpdate):
        lines = [f"[{e.status}] {e.content}" for e in update.entries]
        return item("plan", "\n".join(lines), {"entries": [dump(e) for e in update.entries]})
    if isinstance(update, UsageUpdate):
        data = dump(update)
        data.pop("sessionUpdate", None)
        return item("usage", "", data)
    return None
