"""Session-lifecycle action kinds: they act on the task's live agent session.

They hold no ledger marker (they are once per dispatch, not durable) and are skipped when the
task has no live session. What each did is recorded on the session (its metadata), so the
effect is visible: `laneway session list --task T --json`.
"""

from __future__ import annotations

from collections.abc import Callable

from kanban_plugin.changes import KINDS as CHANGE_KINDS
from kanban_plugin.github import GITHUB
from kanban_plugin.kinds import KINDS
from plugins.api import ActionKind, Forge, hookimpl

__version__ = "0.1.0"


@hookimpl
def laneway_register_action_kinds(register: Callable[[ActionKind], None]) -> None:
    for kind in (*KINDS, *CHANGE_KINDS):
        register(kind)


@hookimpl
def laneway_register_forges(register: Callable[[Forge], None]) -> None:
    register(GITHUB)
