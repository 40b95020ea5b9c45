"""The plugin contract: hook specifications, the ``hookimpl`` marker and the manager.

Plugin authors import from here::

    from plugins import ActionKind, ConfigError, Outcome, hookimpl
"""

from __future__ import annotations

import pluggy

from core.kinds import (
    ALL_PATHS,
    ActionContext,
    ActionFailed,
    ActionKind,
    AgentUse,
    ConfigError,
    Features,
    GuardContext,
    GuardKind,
    GuardResult,
    Outcome,
)

hookimpl = pluggy.HookimplMarker("laneway")
"""Marks a function as an implementation of a ``laneway_*`` hook."""

__all__ = [
    "ALL_PATHS",
    "ActionContext",
    "ActionFailed",
    "ActionKind",
    "AgentUse",
    "ConfigError",
    "Features",
    "GuardContext",
    "GuardKind",
    "GuardResult",
    "Outcome",
    "hookimpl",
]
