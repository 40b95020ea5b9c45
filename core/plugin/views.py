"""What a plugin may reach of the host: narrow, read-only protocols over the host's services.

An executor's `ActionContext.services`, a guard's `GuardContext.services` and the host a
``laneway_*`` observer hook receives are the host itself at run time, but they are typed as
these protocols: each lists exactly the calls the shipped plugins make, so a plugin that
type-checks against them does not depend on the store, the ledger or the engine's internals.
The host satisfies them structurally (``plugins/testing/hosts.py`` proves it to mypy); a new
call a plugin needs is added here first.

Members are read-only properties so that the host's concrete services (subtypes of these
views) satisfy them.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from core.model import Decision, Participant, Run, Session, Step, Task, Workflow, Workspace
    from core.plugin.kinds import Features
    from core.runs import Enqueued, RunRequest
    from core.store.database import UnitOfWork


class TransactionScope(Protocol):
    """Units of work: the one open on this thread is joined, else a new one commits on exit.

    Prefer :meth:`core.plugin.kinds.ActionContext.transaction` / ``isolated`` in an executor.
    """

    @property
    def is_sqlite(self) -> bool:
        """True on SQLite, where a failed statement leaves the transaction usable."""
        ...

    def transaction(self) -> AbstractContextManager[UnitOfWork]: ...

    def isolated(self) -> AbstractContextManager[None]: ...


class DecisionsView(Protocol):
    def clear(self, uow: UnitOfWork, task_id: str, step_id: str) -> int: ...

    def list(self, task_id: str, step_id: str) -> list[Decision]: ...


class ParticipantsView(Protocol):
    def fan_out_seats(self, task_id: str, step_id: str, role: str) -> list[Participant]: ...

    def ensure_task_seat(
        self, task_id: str, step_id: str, role: str, agent_profile_id: str, required: bool
    ) -> Participant: ...

    def quorum_rows(self, task: Task, step: Step) -> list[Participant]: ...


class RunsView(Protocol):
    def enqueue(self, request: RunRequest) -> Enqueued: ...

    def get(self, run_id: str) -> Run | None: ...

    def resolve_target(self, target: str, task: Task, step_id: str) -> list[str]: ...

    def primary_agent(self, task: Task, step_id: str) -> str | None: ...

    def assign(self, task: Task, step_id: str, agent_profile_id: str) -> Enqueued | None: ...

    def start_review(self, task_id: str, step_id: str, agent_profile_id: str | None) -> str: ...


class TasksView(Protocol):
    def get(self, ref: str) -> Task: ...


class ProfileView(Protocol):
    @property
    def id(self) -> str: ...


class ProfilesView(Protocol):
    def get(self, ref: str) -> ProfileView: ...


class SessionsView(Protocol):
    def record_effect(self, session_id: str, **changes: Any) -> Session: ...

    def turn_starting(self, session_id: str) -> bool: ...


class WorkflowsView(Protocol):
    def by_id(self, workflow_id: str) -> Workflow: ...


class WorkspaceView(Protocol):
    def by_id(self, workspace_id: str) -> Workspace: ...


@attrs.frozen
class Claim:
    """A durable action's ledger claim, as its executor names it to a service whose effect
    lies outside the database (`changes.merge`, `changes.push`): the service checks it is
    still held just before the effect, so a process that lost it never acts."""

    entry_id: str
    position: int
    kind: str
    epoch: str


class ChangesView(Protocol):
    """A task's branch leaving the board (`core.services.changes`)."""

    def merge(
        self,
        ref: str,
        *,
        strategy: str | None = None,
        into: str | None = None,
        claim: Claim | None = None,
    ) -> dict[str, Any]:
        """Raises `MergeConflict` (its `paths`) when the branch does not merge cleanly."""
        ...

    def push(self, ref: str, *, claim: Claim | None = None) -> dict[str, Any]: ...

    def conflict_back(self, ref: str, step: str, paths: tuple[str, ...], into: str) -> str: ...

    def pull_request(
        self,
        ref: str,
        *,
        title: str | None = None,
        body: str | None = None,
        draft: bool = False,
        claim: Claim | None = None,
    ) -> dict[str, Any]: ...

    def sync_pull_request(
        self, ref: str, *, moves: Mapping[str, str] | None = None
    ) -> dict[str, Any]: ...

    def send(self, ref: str, step: str, why: str) -> str: ...


class PluginServices(Protocol):
    """The services an executor or a guard reaches through ``ctx.services``."""

    @property
    def decisions(self) -> DecisionsView: ...

    @property
    def participants(self) -> ParticipantsView: ...

    @property
    def runs(self) -> RunsView: ...

    @property
    def tasks(self) -> TasksView: ...

    @property
    def profiles(self) -> ProfilesView: ...

    @property
    def sessions(self) -> SessionsView: ...

    @property
    def workflows(self) -> WorkflowsView: ...

    @property
    def workspace(self) -> WorkspaceView: ...

    @property
    def changes(self) -> ChangesView: ...

    @property
    def store(self) -> TransactionScope:
        """Kept for executors written before ``ctx.transaction()``; only units of work."""
        ...


class TriggerOutcome(Protocol):
    @property
    def idempotent(self) -> bool: ...

    @property
    def action_count(self) -> int: ...


class TriggerEngine(Protocol):
    def handle_trigger(
        self,
        task_id: str,
        trigger: str,
        *,
        session_id: str | None = None,
        operation_id: str | None = None,
        payload: Mapping[str, Any] | None = None,
        label: str | None = None,
        task: Task | None = None,
        caller_reports: bool = False,
    ) -> TriggerOutcome: ...


class RegistryView(Protocol):
    @property
    def features(self) -> Features: ...


class BundleView(Protocol):
    """One published bundle: read it once so the feature switch and the engine agree."""

    @property
    def registry(self) -> RegistryView: ...

    @property
    def engine(self) -> TriggerEngine | None:
        """None only for a bundle built without an engine; a host's bundles have one."""
        ...


class PluginHost(PluginServices, Protocol):
    """The host an observer hook (``laneway_agent_failed``, ``laneway_host_started``) gets."""

    @property
    def bundle(self) -> BundleView: ...


__all__ = [
    "BundleView",
    "ChangesView",
    "Claim",
    "DecisionsView",
    "ParticipantsView",
    "PluginHost",
    "PluginServices",
    "ProfilesView",
    "RegistryView",
    "RunsView",
    "SessionsView",
    "TasksView",
    "TransactionScope",
    "TriggerEngine",
    "TriggerOutcome",
    "WorkflowsView",
    "WorkspaceView",
]
