"""Workflow declarations: the two file formats, shipped templates, export and checks.

- `load_file` / `load_text` decode an internal template or a portable document into
  `WorkflowDecl` values; `instantiate` turns one into a `core.model.Workflow` with new ids.
- `export_document` / `to_yaml` write workflows in the portable format, losing nothing.
- `check_workflow` lists what would keep declarations from running with the loaded plugins;
  `validate_with_registry` refuses, at import, configs a loaded plugin rejects.
"""

from core.workflows.check import AgentUseAt, agent_uses, check_workflow, validate_with_registry
from core.workflows.decl import StepDecl, WorkflowDecl, WorkflowFileError, instantiate
from core.workflows.export import export_document, to_yaml
from core.workflows.load import (
    MAX_FILE_BYTES,
    decode_document,
    load_file,
    load_text,
    shipped_template,
    shipped_templates,
)

__all__ = [
    "MAX_FILE_BYTES",
    "AgentUseAt",
    "StepDecl",
    "WorkflowDecl",
    "WorkflowFileError",
    "agent_uses",
    "check_workflow",
    "decode_document",
    "export_document",
    "instantiate",
    "load_file",
    "load_text",
    "shipped_template",
    "shipped_templates",
    "to_yaml",
    "validate_with_registry",
]
