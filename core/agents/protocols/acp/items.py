"""`session/update` notifications as transcript items (CLI.md: `kind`, `text`, `data`), cut
to their bounds (core.agents.bounds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acp.schema import (
    AgentPlanUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
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


def relative(text: str, cwd: Path | None) -> str:
    """`text` with the working directory's absolute paths written relative to it: a person reads
    `Edit src/a.py`, not the worktree's long path."""
    if cwd is None:
        return text
    root = str(cwd.resolve()) if cwd.exists() else str(cwd)
    for base in {root, str(cwd)}:
        text = text.replace(base + "/", "").replace(base, ".")
    return text


def update_item(update: Any, cwd: Path | None = None) -> TranscriptItem | None:
    """The item of an update that is not a message or thought chunk; None: not transcript.

    Usage updates are no item (issue 41 item 8): their numbers go on the run, and a row with no
    text told a person nothing."""
    if isinstance(update, ToolCallStart | ToolCallProgress):
        data = dump(update)
        data.pop("sessionUpdate", None)
        title = relative(update.title or "", cwd)
        status = update.status or ""
        text = " ".join(p for p in (title, status) if p) or f"tool call {update.tool_call_id}"
        return item("tool_call", text, data)
    if isinstance(update, AgentPlanUpdate):
        lines = [f"[{e.status}] {e.content}" for e in update.entries]
        return item("plan", "\n".join(lines), {"entries": [dump(e) for e in update.entries]})
    return None
