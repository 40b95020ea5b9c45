"""Field coercion for workflow files: one checked value at a time, with where it was found.

Each function takes an `At` (file, workflow, step, and a path prefix for names not yet known),
checks one field of a raw mapping and returns its value, or fails with a one-line
`WorkflowFileError` naming the file, workflow, step and field. Lengths come from the schema so
that SQLite (which does not enforce them) accepts exactly the files PostgreSQL accepts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final, NoReturn

import attrs

from core.numbers import NOT_FINITE
from core.store import tables
from core.text import check_text
from core.workflows import bounded
from core.workflows.decl import WorkflowFileError

MAX_NAME: Final = tables.column_length(tables.workflows.c.name)
MAX_STEP_NAME: Final = tables.column_length(tables.workflow_steps.c.name)
MAX_TEMPLATE_ID: Final = tables.column_length(tables.workflows.c.template_id)
MAX_COLOR: Final = tables.column_length(tables.workflow_steps.c.color)
MAX_KIND: Final = tables.column_length(tables.step_entry_markers.c.kind)
"""An action's kind is a key of its entry markers."""
COLUMN_INT_MIN: Final = -(2**31)
COLUMN_INT_MAX: Final = 2**31 - 1
"""Integer step fields are 32-bit columns on PostgreSQL."""


@attrs.frozen
class At:
    """Where the decoder is, for error messages. `prefix` stands in for a name not yet known."""

    file: str
    workflow: str | None = None
    step: str | None = None
    prefix: str = ""

    def fail(self, field: str | None, problem: str) -> NoReturn:
        raise WorkflowFileError(
            problem,
            file=self.file,
            workflow=self.workflow,
            step=self.step,
            field=_join(self.prefix, field),
        )


def _join(prefix: str, field: str | None) -> str | None:
    if not field:
        return prefix or None
    if not prefix:
        return field
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


def reject_unknown(at: At, raw: Mapping[Any, Any], known: Iterable[str]) -> None:
    allowed = set(known)
    for key in raw:
        if key not in allowed:
            at.fail(str(key), "unknown key")


def required_str(at: At, raw: Mapping[Any, Any], key: str, max_length: int) -> str:
    value = raw.get(key)
    if value is None:
        at.fail(key, "required")
    if not isinstance(value, str):
        at.fail(key, f"expected a string, got {kind_of(value)}")
    if not value.strip():
        at.fail(key, "must not be empty")
    return text(at, key, value, max_length)


def optional_str(
    at: At, raw: Mapping[Any, Any], key: str, default: str, max_length: int | None = None
) -> str:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        at.fail(key, f"expected a string, got {kind_of(value)}")
    return text(at, key, value, max_length)


def text(at: At, key: str, value: str, max_length: int | None = None) -> str:
    """`value`, if every database can store it (in a column of `max_length`)."""
    problem = check_text(value)
    if problem is not None:
        at.fail(key, problem)
    if max_length is not None and len(value) > max_length:
        at.fail(key, f"longer than {max_length} characters ({len(value)})")
    return value


def boolean(at: At, raw: Mapping[Any, Any], key: str, default: bool) -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        at.fail(key, f"expected true or false, got {kind_of(value)}")
    return value


def integer(
    at: At, raw: Mapping[Any, Any], key: str, default: int | None, *, minimum: int | None = None
) -> int:
    """An integer field; `default` None makes it required."""
    value = raw.get(key)
    if value is None:
        if default is None:
            at.fail(key, "required")
        return default
    if type(value) is not int:
        at.fail(key, f"expected an integer, got {kind_of(value)}")
    if minimum is not None and value < minimum:
        at.fail(key, f"must be >= {minimum}, got {value}")
    if not COLUMN_INT_MIN <= value <= COLUMN_INT_MAX:
        at.fail(key, f"out of range ({COLUMN_INT_MIN}..{COLUMN_INT_MAX}), got {value}")
    return value


def agent_profile(at: At, raw: Mapping[Any, Any]) -> None:
    """Accepted for compatibility; matching it to a local profile is not done on import."""
    value = raw.get("agent_profile")
    if value is not None and not isinstance(value, dict):
        at.fail(
            "agent_profile", f"expected a mapping (agent_name, model, mode), got {kind_of(value)}"
        )


def kind_of(value: Any) -> str:
    """A value's type in YAML's words, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def show(value: Any) -> str:
    """A short rendering of a scalar, or its kind for anything bigger."""
    if isinstance(value, str):
        return f"'{value}'"
    if value is None or isinstance(value, bool | int | float):
        return kind_of(value) if value is None else repr(value)
    if isinstance(value, list | dict) and not value:
        return f"an empty {kind_of(value).removeprefix('a ')}"
    return kind_of(value)


def plain(at: At, path: str, value: Any, depth: int = 0) -> None:
    """Configs are stored as JSON, so they may hold only what JSON can say, and only text
    every database stores. A document parsed elsewhere (a JSON body) was not scanned by
    `bounded`, so depth and integer range are checked here too."""
    if depth > bounded.MAX_DEPTH:
        at.fail(path, f"nested deeper than {bounded.MAX_DEPTH} levels (limit)")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                at.fail(path, f"keys must be strings, got {kind_of(key)} {key!r}")
            text(at, path, key)
            plain(at, f"{path}.{key}", item, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            plain(at, f"{path}[{i}]", item, depth + 1)
    elif isinstance(value, str):
        text(at, path, value)
    elif isinstance(value, int) and not isinstance(value, bool):
        if not bounded.INT_MIN <= value <= bounded.INT_MAX:
            at.fail(path, f"integer out of range ({bounded.INT_MIN}..{bounded.INT_MAX})")
    elif isinstance(value, float) and not math.isfinite(value):
        at.fail(path, f"{value} {NOT_FINITE}")
    elif value is not None and not isinstance(value, float | bool):
        at.fail(path, f"expected a JSON value, got {type(value).__name__}")
