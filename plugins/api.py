"""The public plugin API: everything a laneway plugin imports, from one module.

A plugin (and its tests, with the contract kit :mod:`plugins.testing`) imports from here or
from :mod:`plugins`, which re-exports it, and from nothing else of laneway::

    from plugins.api import ActionContext, ActionKind, ConfigError, Outcome, hookimpl

What is here:

- declarations: :class:`ActionKind`, :class:`GuardKind`, :class:`AgentUse`,
  :class:`Features`, ``ALL_PATHS``, the :data:`hookimpl` marker;
- what an executor or a guard receives and returns: :class:`ActionContext`,
  :class:`GuardContext`, :class:`Outcome`, :class:`GuardResult`;
- errors: :class:`ConfigError` (a declaration's config is wrong), :class:`ActionFailed`
  (the action did not take effect), :class:`LanewayError` (what a host call raises for a
  user mistake: a task, profile or target that does not exist);
- the typed host: :class:`PluginServices` (``ctx.services``), :class:`PluginHost` (what an
  observer hook receives) and the views they list;
- values: :class:`Task`, :class:`Step`, :class:`Workflow`, :class:`Workspace`,
  :class:`Session`, :class:`Participant`, :class:`Decision`, :class:`Run`,
  ``PARTICIPANT_ROLES``, :class:`RunRequest` (what ``services.runs.enqueue`` takes),
  :class:`AgentFailure` (what ``laneway_agent_failed`` observes), :class:`FailureCase` (the
  failure as the host decided it once, which the hook receives beside it) and
  :func:`payload_of` (the on_agent_error payload for a failure), :func:`build_prompt`;
- :func:`fault_point` (``core.faults.reach``): a named point crash tests can stop at;
- :func:`disable_logs` (``core.logs.disable``): loguru's ``logger.disable`` for a plugin's
  package at import, without importing loguru before anything logs;
- landing a task's branch: :class:`ChangesView` (``ctx.services.changes``), the
  :class:`Claim` an executor names to it, :class:`MergeConflict` (its ``paths``) and
  ``MERGE_STRATEGIES``.

What a plugin's own command needs to open and drive a board (``Host``, ``writer``, ...) is
:mod:`plugins.app`'s: nothing here hands out a host.

Names not listed in ``__all__`` are not part of the contract.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import pluggy

import core.logs  # noqa: F401 - a plugin's records, like laneway's, stay off until enabled
from core.errors import LanewayError
from core.faults import reach as fault_point
from core.logs import disable as disable_logs
from core.model import (
    PARTICIPANT_ROLES,
    AgentFailure,
    Decision,
    FailureCase,
    Participant,
    Run,
    Session,
    Step,
    Task,
    Workflow,
    Workspace,
)
from core.plugin.kinds import (
    ALL_PATHS,
    ActionContext,
    ActionFailed,
    ActionKind,
    AgentUse,
    ConfigError,
    Features,
    Forge,
    ForgeConfig,
    GuardContext,
    GuardKind,
    GuardResult,
    Outcome,
    PullRequest,
    ReviewComment,
    accept_any,
)
from core.plugin.views import (
    BundleView,
    ChangesView,
    Claim,
    DecisionsView,
    ParticipantsView,
    PluginHost,
    PluginServices,
    ProfilesView,
    RegistryView,
    RunsView,
    SessionsView,
    TasksView,
    TransactionScope,
    TriggerEngine,
    TriggerOutcome,
    WorkflowsView,
    WorkspaceView,
)
from core.prompts import build_prompt

if TYPE_CHECKING:
    from core.agents.failure import dispatched, payload_of
    from core.gitmerge import STRATEGIES as MERGE_STRATEGIES
    from core.gitmerge import MergeConflict
    from core.runs import RunRequest

hookimpl = pluggy.HookimplMarker("laneway")
"""Marks a function as an implementation of a ``laneway_*`` hook."""


_LAZY: dict[str, tuple[str, str]] = {
    # in the agent wing and the run queue: importing the API (every plugin does, as it is
    # loaded) never loads either
    "payload_of": ("core.agents.failure", "payload_of"),
    "dispatched": ("core.agents.failure", "dispatched"),
    "RunRequest": ("core.runs", "RunRequest"),
    # git's merge machinery: a command that merges nothing (`task move`) never loads it
    "MERGE_STRATEGIES": ("core.gitmerge", "STRATEGIES"),
    "MergeConflict": ("core.gitmerge", "MergeConflict"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'plugins.api' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    return getattr(importlib.import_module(module_name), attribute)


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
    "FailureCase",
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
    "disable_logs",
    "dispatched",
    "fault_point",
    "hookimpl",
    "payload_of",
]
