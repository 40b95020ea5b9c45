"""Reading workflow files: the entry points, and the templates laneway ships.

The work is split by what it is about: `reading` (the file and its YAML, within limits),
`formats` (the template and portable formats, into `WorkflowDecl`), `linking` (rules across
steps, references into keys) and `fields` (one checked field at a time). This module keeps the
names callers import (`core.workflows.load.load_text` and friends).
"""

from __future__ import annotations

import functools
import importlib.resources
import os

from core.workflows import reading
from core.workflows.decl import WorkflowDecl
from core.workflows.fields import (
    COLUMN_INT_MAX,
    COLUMN_INT_MIN,
    MAX_COLOR,
    MAX_KIND,
    MAX_NAME,
    MAX_STEP_NAME,
    MAX_TEMPLATE_ID,
)
from core.workflows.formats import (
    PORTABLE_STEP_REF,
    PORTABLE_TYPE,
    PORTABLE_VERSION,
    decode_document,
)
from core.workflows.reading import MAX_FILE_BYTES

__all__ = [
    "COLUMN_INT_MAX",
    "COLUMN_INT_MIN",
    "MAX_COLOR",
    "MAX_FILE_BYTES",
    "MAX_KIND",
    "MAX_NAME",
    "MAX_STEP_NAME",
    "MAX_TEMPLATE_ID",
    "PORTABLE_STEP_REF",
    "PORTABLE_TYPE",
    "PORTABLE_VERSION",
    "decode_document",
    "load_file",
    "load_text",
    "shipped_template",
    "shipped_templates",
]


def load_file(path: str | os.PathLike[str]) -> list[WorkflowDecl]:
    """The workflows declared in the file at `path` (either format)."""
    return load_text(reading.read_file(path), source=os.fspath(path))


def load_text(text: str, source: str = "<string>") -> list[WorkflowDecl]:
    """The workflows declared in `text` (either format); `source` names it in errors."""
    return decode_document(reading.parse(text, source), source)


# --- shipped templates ----------------------------------------------------------------------


@functools.cache
def _shipped() -> tuple[WorkflowDecl, ...]:
    folder = importlib.resources.files("core.workflows.templates")
    decls: list[WorkflowDecl] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yml"):
            text = entry.read_text(encoding="utf-8")
            decls.extend(load_text(text, source=f"templates/{entry.name}"))
    return tuple(decls)


def shipped_templates() -> list[WorkflowDecl]:
    """The templates laneway ships, hidden ones included, ordered by file name."""
    return list(_shipped())


def shipped_template(template_id: str) -> WorkflowDecl | None:
    """The shipped template with this id, or None."""
    for decl in _shipped():
        if decl.template_id == template_id:
            return decl
    return None
