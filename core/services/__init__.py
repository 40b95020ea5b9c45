"""The host's services: what `host.tasks`, `host.workflows`, ... offer an embedding program.

Each service's module is imported when the service is first named (the host builds a service
when it is first used): reading tasks need not import the runs queue or the arrival layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.services.blockers import BlockerService
    from core.services.budgets import BudgetService
    from core.services.changes import ChangeService
    from core.services.comments import CommentService
    from core.services.decisions import DecisionService
    from core.services.entries import EntryService
    from core.services.participants import ParticipantService
    from core.services.permissions import PermissionService
    from core.services.plugins import PluginService
    from core.services.profiles import ProfileService
    from core.services.questions import QuestionService
    from core.services.runs import RunService
    from core.services.schedules import ScheduleService
    from core.services.sessions import SessionService
    from core.services.tasks import TaskService
    from core.services.triggers import TriggerService
    from core.services.turns import TurnService
    from core.services.workflows import WorkflowService
    from core.services.workspace import WorkspaceService

MODULES = {
    "BlockerService": "blockers",
    "BudgetService": "budgets",
    "ChangeService": "changes",
    "CommentService": "comments",
    "DecisionService": "decisions",
    "EntryService": "entries",
    "ParticipantService": "participants",
    "PermissionService": "permissions",
    "PluginService": "plugins",
    "ProfileService": "profiles",
    "QuestionService": "questions",
    "RunService": "runs",
    "ScheduleService": "schedules",
    "SessionService": "sessions",
    "TaskService": "tasks",
    "TriggerService": "triggers",
    "TurnService": "turns",
    "WorkflowService": "workflows",
    "WorkspaceService": "workspace",
}
"""Each service class and its module under `core.services`."""

__all__ = [
    "BlockerService",
    "BudgetService",
    "ChangeService",
    "CommentService",
    "DecisionService",
    "EntryService",
    "ParticipantService",
    "PermissionService",
    "PluginService",
    "ProfileService",
    "QuestionService",
    "RunService",
    "ScheduleService",
    "SessionService",
    "TaskService",
    "TriggerService",
    "TurnService",
    "WorkflowService",
    "WorkspaceService",
]


def __getattr__(name: str) -> Any:
    module = MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'core.services' has no attribute {name!r}")
    return getattr(importlib.import_module(f"core.services.{module}"), name)
