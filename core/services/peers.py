"""What a service, the agent runtime and the agent-error path are handed when they are built:
the host's parts they call, seen as a protocol, never `core.host.Host`.

The composition root (`core.host`) hands itself over, and satisfies this structurally; the
modules below it then never import it, so no import circle runs through the host. Each part is
still built when first named (`core.host._Built`), so a command imports only what it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.arrival import Arrivals
    from core.bundle import Bundle
    from core.engine import Engine
    from core.kernel import Kernel
    from core.operations import Operations
    from core.services.blockers import BlockerService
    from core.services.budgets import BudgetService
    from core.services.changes import ChangeService
    from core.services.comments import CommentService
    from core.services.decisions import DecisionService
    from core.services.entries import EntryService
    from core.services.participants import ParticipantService
    from core.services.permissions import PermissionService
    from core.services.profiles import ProfileService
    from core.services.runs import RunService
    from core.services.sessions import SessionService
    from core.services.tasks import TaskService
    from core.services.triggers import TriggerService
    from core.services.turns import TurnService
    from core.services.workflows import WorkflowService
    from core.services.workspace import WorkspaceService
    from core.store.database import Store
    from core.store.repository import Repository


class Peers(Protocol):
    """The host's parts a service or the runtime calls (each built when first read)."""

    @property
    def store(self) -> Store: ...

    @property
    def repository(self) -> Repository: ...

    @property
    def kernel(self) -> Kernel: ...

    @property
    def writable(self) -> bool: ...

    @property
    def bundle(self) -> Bundle: ...

    def current_bundle(self) -> Bundle | None: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def arrivals(self) -> Arrivals: ...

    def live_epoch(self) -> str: ...

    def watch_epoch(self, on_lost: Callable[[str], object]) -> Callable[[], None]: ...

    def follow_board(self) -> None: ...

    @property
    def workspace(self) -> WorkspaceService: ...

    @property
    def profiles(self) -> ProfileService: ...

    @property
    def workflows(self) -> WorkflowService: ...

    @property
    def tasks(self) -> TaskService: ...

    @property
    def participants(self) -> ParticipantService: ...

    @property
    def decisions(self) -> DecisionService: ...

    @property
    def sessions(self) -> SessionService: ...

    @property
    def turns(self) -> TurnService: ...

    @property
    def runs(self) -> RunService: ...

    @property
    def entries(self) -> EntryService: ...

    @property
    def comments(self) -> CommentService: ...

    @property
    def changes(self) -> ChangeService: ...

    @property
    def permissions(self) -> PermissionService: ...

    @property
    def operations(self) -> Operations: ...

    @property
    def blockers(self) -> BlockerService: ...

    @property
    def budgets(self) -> BudgetService: ...

    @property
    def triggers(self) -> TriggerService: ...
