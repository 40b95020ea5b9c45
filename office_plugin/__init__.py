"""Office: reviewer and approver fan-out, decisions and quorum, runs, Office task ownership."""

from __future__ import annotations

from collections.abc import Callable

from core.kinds import ActionKind, GuardKind
from core.model import Task, Workspace
from office_plugin import quorum
from office_plugin.kinds import declarations
from plugins import hookimpl

__version__ = "0.1.0"
NAME = "office"


@hookimpl
def laneway_register_action_kinds(register: Callable[[ActionKind], None]) -> None:
    for kind in declarations():
        register(kind)


@hookimpl
def laneway_register_guards(register: Callable[[GuardKind], None]) -> None:
    register(quorum.GUARD)


@hookimpl
def laneway_task_ownership(task: Task, workspace: Workspace) -> str | None:
    """Office owns tasks with a project, and tasks in the workspace's office workflow."""
    if task.project_id or (
        workspace.office_workflow_id is not None
        and task.workflow_id == workspace.office_workflow_id
    ):
        return NAME
    return None
