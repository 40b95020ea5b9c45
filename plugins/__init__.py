"""The plugin contract: hook specifications, the ``hookimpl`` marker and the manager.

Plugin authors import from here or from :mod:`plugins.api` (the same names)::

    from plugins import ActionKind, ConfigError, Outcome, hookimpl
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugins import api
from plugins.api import (
    ALL_PATHS,
    MERGE_STRATEGIES,
    PARTICIPANT_ROLES,
    ActionContext,
    ActionFailed,
    ActionKind,
    AgentFailure,
    AgentUse,
    BundleView,
    ChangesView,
    Claim,
    ConfigError,
    Decision,
    DecisionsView,
    Features,
    Forge,
    ForgeConfig,
    GuardContext,
    GuardKind,
    GuardResult,
    LanewayError,
    MergeConflict,
    Outcome,
    Participant,
    ParticipantsView,
    PluginHost,
    PluginServices,
    ProfilesView,
    PullRequest,
    RegistryView,
    ReviewComment,
    Run,
    RunsView,
    Session,
    SessionsView,
    Step,
    Task,
    TasksView,
    TransactionScope,
    TriggerEngine,
    TriggerOutcome,
    Workflow,
    WorkflowsView,
    Workspace,
    WorkspaceView,
    accept_any,
    build_prompt,
    fault_point,
    hookimpl,
)

if TYPE_CHECKING:
    from plugins.api import RunRequest, dispatched, payload_of


def __getattr__(name: str) -> Any:
    # the lazy names resolve on first use, as in plugins.api
    if name in api.LAZY:
        return getattr(api, name)
    raise AttributeError(f"module 'plugins' has no attribute {name!r}")


__all__ = [
    "ALL_PATHS",
    "MERGE_STRATEGIES",
    "PARTICIPANT_ROLES",
    "ActionContext",
    "ActionFailed",
    "ActionKind",
    "AgentFailure",
    "AgentUse",
    "BundleView",
    "ChangesView",
    "Claim",
    "ConfigError",
    "Decision",
    "DecisionsView",
    "Features",
    "Forge",
    "ForgeConfig",
    "GuardContext",
    "GuardKind",
    "GuardResult",
    "LanewayError",
    "MergeConflict",
    "Outcome",
    "Participant",
    "ParticipantsView",
    "PluginHost",
    "PluginServices",
    "ProfilesView",
    "PullRequest",
    "RegistryView",
    "ReviewComment",
    "Run",
    "RunRequest",
    "RunsView",
    "Session",
    "SessionsView",
    "Step",
    "Task",
    "TasksView",
    "TransactionScope",
    "TriggerEngine",
    "TriggerOutcome",
    "Workflow",
    "WorkflowsView",
    "Workspace",
    "WorkspaceView",
    "accept_any",
    "build_prompt",
    "dispatched",
    "fault_point",
    "hookimpl",
    "payload_of",
]
