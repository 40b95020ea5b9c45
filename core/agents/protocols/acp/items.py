"""`session/update` notifications as transcript items (CLI.md: `kind`, `text`, `data`), cut
to their bounds (core.agents.bounds)."""

from __future__ import annotations

from typing import Any

from acp.schema import (
    AgentPlanUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    UsageUpdate,
)
from pydantic import BaseModel

from core.agents.bounds import MAX_DATA, MAX_TEXT, bounded_data, cut_text, item
from core.agents.values import TranscriptItem

__all__ = [
    "MAX_DATA",
    "MAX_TEXT",
    "block_text",
    "bounded_data",
    "cut_text",
    "dump",
    "item",
    "update_item",
]


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
