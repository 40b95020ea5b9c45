"""The agent wing's port: the host's parts the wing calls, and only those.

The wing is handed the host (the composition root satisfies this protocol structurally) but
names only what is listed here: a part the wing starts to call is added here, in sight, not
reached for through a locator that offers every service. `core.agents.session.AgentHost` adds
the runtime, which the worker and the arrival's session step call and the rooms below the
runtime never do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.bundle import Bundle
    from core.engine import Engine
    from core.services.changes import ChangeService
    from core.services.comments import CommentService
    from core.services.decisions import DecisionService
    from core.services.participants import ParticipantService
    from core.services.permissions import PermissionService
    from core.services.profiles import ProfileService
    from core.services.questions import QuestionService
    from core.services.runs import RunService
    from core.services.sessions import SessionService
    from core.services.tasks import TaskService
    from core.services.triggers import TriggerService
    from core.services.turns import TurnService
    from core.services.workflows import WorkflowService
    from core.services.workspace import WorkspaceService
    from core.store.database import Store


class AgentPort(Protocol):
    """What the wing's rooms call on the host."""

    @property
    def store(self) -> Store: ...

    @property
    def bundle(self) -> Bundle: ...

    def current_bundle(self) -> Bundle | None: ...

    @property
    def engine(self) -> Engine: ...

    def live_epoch(self) -> str: ...

    def watch_epoch(self, on_lost: Callable[[str], object]) -> Callable[[], None]: ...

    @property
    def tasks(self) -> TaskService: ...

    @property
    def sessions(self) -> SessionService: ...

    @property
    def turns(self) -> TurnService: ...

    @property
    def runs(self) -> RunService: ...

    @property
    def workflows(self) -> WorkflowService: ...

    @property
    def profiles(self) -> ProfileService: ...

    @property
    def decisions(self) -> DecisionService: ...

    @property
    def comments(self) -> CommentService: ...

    @property
    def changes(self) -> ChangeService: ...

    @property
    def permissions(self) -> PermissionService: ...

    @property
    def questions(self) -> QuestionService: ...

    @property
    def triggers(self) -> TriggerService: ...

    # The failure room hands the host on to plugin hooks (`laneway_agent_failed`, the
    # on_agent_error context), which see it as a `core.plugin.views.PluginHost`: the wing calls
    # neither of these itself.

    @property
    def participants(self) -> ParticipantService: ...

    @property
    def workspace(self) -> WorkspaceService: ...
