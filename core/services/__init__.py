"""The host's services: what `host.tasks`, `host.workflows`, ... offer an embedding program."""

from core.services.decisions import DecisionService
from core.services.entries import EntryService
from core.services.participants import ParticipantService
from core.services.plugins import PluginService
from core.services.profiles import ProfileService
from core.services.runs import RunService
from core.services.sessions import SessionService
from core.services.tasks import TaskService
from core.services.turns import TurnService
from core.services.workflows import WorkflowService
from core.services.workspace import WorkspaceService

__all__ = [
    "DecisionService",
    "EntryService",
    "ParticipantService",
    "PluginService",
    "ProfileService",
    "RunService",
    "SessionService",
    "TaskService",
    "TurnService",
    "WorkflowService",
    "WorkspaceService",
]
