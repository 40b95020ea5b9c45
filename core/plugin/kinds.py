"""What a plugin declares: action kinds and guards, and the values their functions exchange.

A kind declares its own behaviour (owner, placement, durability, whether a failure halts the
entry, ...). `core` reads these flags; it never switches on a kind's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

# Declared apart (`core.plugin.features`); re-exported, as plugins have always named it here.
from core.plugin.features import Features as Features  # noqa: PLC0414

if TYPE_CHECKING:
    from loguru import Logger

    from core.model import Session, Step, Task
    from core.plugin.views import PluginServices
    from core.store.database import UnitOfWork

Owner = Literal["session", "durable", "structural"]
Placement = Literal["first", "second", "last"]
ALL_PATHS: Final[frozenset[str]] = frozenset({"E1", "E2", "E3", "E4", "E5"})


class ConfigError(ValueError):
    """A declaration's config is wrong. `field` names the offending key when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ActionFailed(Exception):
    """Raised by an executor whose action did not take effect; `cause` is recorded."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


@attrs.frozen
class Outcome:
    """What an executor reports. Returning None from an executor means `done`."""

    state: Literal["done", "skipped", "failed"]
    reason: str | None = None
    cause: str | None = None

    @classmethod
    def done(cls, cause: str | None = None) -> Outcome:
        return cls("done", cause=cause)

    @classmethod
    def skipped(cls, reason: str) -> Outcome:
        return cls("skipped", reason=reason)

    @classmethod
    def failed(cls, cause: str) -> Outcome:
        return cls("failed", cause=cause)


@attrs.frozen
class ActionContext:
    """Everything an executor may use for one action of one trigger evaluation.

    `entry_id`, `entry_seq` and `entry_path` identify the step entry for on_enter actions and
    are None for other triggers. `services` is what a plugin may call of the host (runs,
    participants, decisions, sessions, tasks, ...; see :mod:`core.plugin.views`). `uow` is
    the open unit of work for `transactional` kinds; other kinds that need one take it from
    :meth:`transaction`.
    `logger` is already bound with task_id, step_id, workflow_id, step_name and action_type.
    """

    task: Task
    step: Step
    trigger: str
    position: int
    session: Session | None
    services: PluginServices
    logger: Logger
    entry_id: str | None = None
    entry_seq: int | None = None
    entry_path: str | None = None
    operation_id: str | None = None
    epoch: str | None = None
    uow: Any = None
    payload: Mapping[str, Any] | None = None
    fired_by_agent: str | None = None
    """The agent profile whose own act fired this trigger (a comment it wrote), or None."""

    def wakes(self, agent_profile_id: str) -> bool:
        """Whether an action may queue a run of this agent: never the agent whose own act
        fired the trigger (its comment does not wake it again, for ever)."""
        return agent_profile_id != self.fired_by_agent

    def transaction(self) -> AbstractContextManager[UnitOfWork]:
        """A unit of work: the one already open on this thread (``uow`` of a transactional
        kind) is joined, else a new one commits on a normal exit and rolls back on an
        exception."""
        return self.services.store.transaction()

    def isolated(self) -> AbstractContextManager[None]:
        """Inside a unit of work, a block whose failure leaves the rest of the unit usable
        (a savepoint where the database needs one); outside one, its own transaction."""
        return self.services.store.isolated()

    def idempotency_key(
        self, agent_profile_id: str, config: Mapping[str, Any] | None = None
    ) -> str | None:
        """The key that makes a repeated enqueue for this action and agent a no-op.

        :param config: the action's *canonical* config (defaults applied), digested with
            sorted keys, so an omitted value and its explicit default give the same key.

        On entry: the entry identity (task, step, entry_seq), the action's position and the
        agent, so a replay of the entry is suppressed while a re-entry, or a second
        declaration at another position, is not. On other triggers: the operation id when
        there is one; without one there is no key.
        """
        return self.idempotency_keyer(config)(agent_profile_id)

    def idempotency_keyer(
        self, config: Mapping[str, Any] | None = None
    ) -> Callable[[str], str | None]:
        """`idempotency_key` with the config bound: the digest and the entry's part of the key
        are computed once, so an action that keys one run per agent (a fan-out) pays for the
        canonical dump and its hash once, not once per agent."""
        if self.entry_seq is not None:
            head = f"on_enter:{self.task.id}:{self.step.id}:{self.entry_seq}:{self.position}:"
        elif self.operation_id:
            head = f"{self.operation_id}:{self.step.id}:{self.task.id}:"
        else:
            return lambda _agent_profile_id: None
        from core.runs import config_digest

        tail = f":{config_digest(dict(config or {}))}"
        return lambda agent_profile_id: f"{head}{agent_profile_id}{tail}"


def run_executor(
    execute: Callable[[ActionContext, Any], Outcome | None], ctx: ActionContext, value: Any
) -> Outcome | None:
    """Run an action's executor; what it raises becomes a failed outcome, so a plugin's bug
    or refusal never stops the entry walk or the trigger that runs it (the caller decides
    what a failure means there). The one place both an arrival's entry sequence
    (core.entry) and a trigger's actions (core.actions) run an executor."""
    try:
        return execute(ctx, value)
    except Exception as exc:  # noqa: BLE001 - a plugin's bug must not stop its caller
        return failed_by(ctx, exc)


def failed_by(ctx: ActionContext, exc: Exception) -> Outcome:
    """The outcome of an executor that raised `exc`."""
    if isinstance(exc, ActionFailed):
        return Outcome.failed(exc.cause)
    if isinstance(exc, ConfigError):
        return Outcome.failed(str(exc))
    ctx.logger.opt(exception=exc).debug("executor raised")
    return Outcome.failed(f"{type(exc).__name__}: {exc}")


@attrs.frozen
class AgentUse:
    """An agent an action can start or seat, for `laneway workflow check` to show.

    :param verb: ``"starts"`` (queues a run or a turn) or ``"seats"`` (makes it a participant).
    :param target: how the action names the agent, as written (``primary``,
        ``participant_role:reviewer``, ``workspace.ceo_agent``, ...).
    :param profile: a profile the workflow names by id or name; the check says when it
        resolves to nothing. None when the agent is found at run time (seats, roles, primary).
    :param role: the participant role (``participant_role:<role>``, fan-out, seat) or the
        profile role (``workspace.ceo_agent``: ``ceo``) the agent is found by.
    """

    verb: Literal["starts", "seats"]
    target: str
    profile: str | None = None
    role: str | None = None


Validate = Callable[[Mapping[str, Any]], Any]
Execute = Callable[[ActionContext, Any], "Outcome | None"]


def accept_any(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The validator of a kind that takes no particular config."""
    return config


@attrs.frozen
class ActionKind:
    """One action kind, as a plugin declares it through `laneway_register_action_kinds`.

    :param name: the `type` a workflow file writes.
    :param owner: ``"session"`` kinds act on the task's live session and hold no marker;
        ``"durable"`` kinds run behind a ledger marker, with or without a session;
        ``"structural"`` kinds (moves, switch_workflow) change the task's step.
    :param validate: turns the declared config into the value the executor receives; raises
        :class:`ConfigError` naming the field. Called at import and again at dispatch.
    :param execute: ``(ctx, config) -> Outcome | None``; raise :class:`ActionFailed`.
        None while the plugin's feature is off is not allowed here: the host strips executors.
    :param placement: for session kinds, hoisting on entry paths E1-E3 and E5.
    :param halts_entry_on_failure: a failure stops the rest of the entry (clear_decisions).
    :param transactional: effect and done-marker commit in one transaction (``ctx.uow``).
    :param once_per_entry: runs at most once per entry even when declared twice.
    :param paths: entry paths on which the kind has an owner; elsewhere it warns.
    :param logs_own_failures: the executor writes its own failure records (the fan-out's
        per-participant ones), so the dispatcher adds no action-level ERROR.
    :param feature: host feature the kind belongs to; off means recognised but no executor.
    :param trigger_ok: whether the kind may be declared on a trigger (on_enter excludes moves).
    :param agents: ``(validated config) -> AgentUse...``: the agents an action of this kind
        can start or seat. Kinds that start no agent leave it None.
    :param starts_agent: declared on an entry, the kind starts the step's agent itself, so an
        arrival that switches the task to the step's agent does not start it a second time.
    :param moves: the kind is a move the engine chooses (a structural kind whose target is
        resolved, never executed as an action).
    """

    name: str
    owner: Owner
    execute: Execute | None = None
    validate: Validate = accept_any
    placement: Placement | None = None
    halts_entry_on_failure: bool = False
    transactional: bool = False
    once_per_entry: bool = False
    paths: frozenset[str] = ALL_PATHS
    logs_own_failures: bool = False
    feature: str | None = None
    trigger_ok: Callable[[str], bool] = attrs.field(default=lambda trigger: True)
    description: str = ""
    agents: Callable[[Any], Iterable[AgentUse]] | None = None
    starts_agent: bool = False
    moves: bool = False


@attrs.frozen
class GuardResult:
    satisfied: bool
    reason: str = ""
    detail: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class GuardContext:
    """What a guard sees: the task, the step whose transition it gates, and the services
    (:class:`core.plugin.views.PluginServices`)."""

    task: Task
    step: Step
    trigger: str
    services: PluginServices
    logger: Logger


@attrs.frozen
class GuardKind:
    """A transition guard (``if: {<name>: config}``, or the legacy top-level ``<name>:``).

    :param validate: checks the guard config at load; raises :class:`ConfigError`.
    :param evaluate: ``(ctx, config) -> GuardResult``.
    :param feature: host feature the guard belongs to; off means it never passes.
    """

    name: str
    validate: Validate
    evaluate: Callable[[GuardContext, Any], GuardResult]
    feature: str | None = None
    description: str = ""


# -- forges: where a task's branch becomes a pull request --------------------------------------


@attrs.frozen
class ForgeConfig:
    """A workflow's forge, as `workflow set --forge` stored it, with its token read from the
    worker's environment at run time (never stored)."""

    kind: str
    repo: str
    url: str | None = None
    token: str | None = None


@attrs.frozen
class PullRequest:
    number: int
    url: str
    state: Literal["open", "closed", "merged"]
    head: str


@attrs.frozen
class ReviewComment:
    """What a reviewer said on a pull request: a comment on a line of its diff (`path`,
    `line`), or, with `path` empty and `line` 0, on the pull request as a whole (a review's
    summary, a comment in its conversation), which reaches the task as a plain comment."""

    id: str
    path: str
    line: int
    body: str
    author: str


@attrs.frozen
class Forge:
    """A forge a plugin declares through `laneway_register_forges` (`github` in the box).

    :param open_or_update: ``(config, head, base, title, body, draft) -> PullRequest``: the
        one pull request for the branch `head` (state any): updated when there is one, else
        opened. Keyed by the branch, so calling it again never opens a second.
    :param review_comments: ``(config, number) -> [ReviewComment]``, oldest first.
    :param pull_request: ``(config, number) -> PullRequest``: its state now.
    Each raises a :class:`core.errors.LanewayError` whose message is one line naming the forge
    and what it answered.
    """

    name: str
    open_or_update: Callable[[ForgeConfig, str, str, str, str, bool], PullRequest]
    review_comments: Callable[[ForgeConfig, int], Sequence[ReviewComment]]
    pull_request: Callable[[ForgeConfig, int], PullRequest]
