"""Office's durable kinds: declarations and config validators.

Declared whatever the host's features, so that a disabled Office still makes them recognised
(and skipped with a warning) rather than unknown; the host drops their executors then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plugins.api import (
    PARTICIPANT_ROLES,
    ActionContext,
    ActionKind,
    AgentUse,
    ConfigError,
    Outcome,
)

TARGET_PREFIXES = ("participant_role:", "agent_profile_id:")
TARGETS = ("primary", "workspace.ceo_agent")


def _payload(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    payload = config.get("payload")
    if payload is not None and not isinstance(payload, Mapping):
        raise ConfigError("config.payload must be a mapping", field="config.payload")
    return payload


def _reason(config: Mapping[str, Any]) -> str | None:
    reason = config.get("reason")
    if reason is not None and (not isinstance(reason, str) or not reason):
        raise ConfigError("config.reason must be a non-empty string", field="config.reason")
    return reason


@attrs.frozen
class QueueRunConfig:
    target: str
    task_id: str
    reason: str | None
    payload: Mapping[str, Any] | None


def validate_queue_run(config: Mapping[str, Any]) -> QueueRunConfig:
    target = config.get("target", "primary")
    if not isinstance(target, str) or not (
        target in TARGETS
        or any(target.startswith(p) and len(target) > len(p) for p in TARGET_PREFIXES)
    ):
        raise ConfigError(
            f"queue_run target {target!r}: use primary, participant_role:<role>, "
            "agent_profile_id:<id> or workspace.ceo_agent",
            field="config.target",
        )
    task_id = config.get("task_id", "this")
    if not isinstance(task_id, str) or not task_id:
        raise ConfigError("config.task_id must be 'this' or a task id", field="config.task_id")
    return QueueRunConfig(target, task_id, _reason(config), _payload(config))


@attrs.frozen
class FanOutConfig:
    role: str
    reason: str | None
    payload: Mapping[str, Any] | None


def validate_fan_out(config: Mapping[str, Any]) -> FanOutConfig:
    role = config.get("role")
    if not isinstance(role, str) or not role:
        raise ConfigError("queue_run_for_each_participant needs config.role", field="config.role")
    if role not in PARTICIPANT_ROLES:
        raise ConfigError(
            f"config.role {role!r}: must be one of {', '.join(PARTICIPANT_ROLES)}",
            field="config.role",
        )
    return FanOutConfig(role, _reason(config), _payload(config))


def validate_clear(config: Mapping[str, Any]) -> None:
    if config:
        raise ConfigError(
            f"clear_decisions takes no config (got {', '.join(map(str, config))})",
            field="config",
        )


def validate_code_review(config: Mapping[str, Any]) -> str | None:
    profile = config.get("agent_profile_id")
    if profile is not None and not isinstance(profile, str):
        raise ConfigError(
            "config.agent_profile_id must be a string", field="config.agent_profile_id"
        )
    return profile or None


@attrs.frozen
class SeatConfig:
    role: str
    agent_profile_id: str
    decision_required: bool


def validate_seat(config: Mapping[str, Any]) -> SeatConfig:
    role, agent = config.get("role"), config.get("agent_profile_id")
    if role not in PARTICIPANT_ROLES:
        raise ConfigError(
            f"config.role must be one of {', '.join(PARTICIPANT_ROLES)}", field="config.role"
        )
    if not isinstance(agent, str) or not agent:
        raise ConfigError("config.agent_profile_id is required", field="config.agent_profile_id")
    required = config.get("decision_required", role in ("reviewer", "approver"))
    if not isinstance(required, bool):
        raise ConfigError(
            "config.decision_required must be a boolean", field="config.decision_required"
        )
    return SeatConfig(str(role), agent, required)


def queue_run_agents(config: QueueRunConfig) -> tuple[AgentUse, ...]:
    target = config.target
    if target.startswith("agent_profile_id:"):
        return (AgentUse("starts", target, profile=target.removeprefix("agent_profile_id:")),)
    if target.startswith("participant_role:"):
        return (AgentUse("starts", target, role=target.removeprefix("participant_role:")),)
    if target == "workspace.ceo_agent":
        return (AgentUse("starts", target, role="ceo"),)
    return (AgentUse("starts", target),)


def fan_out_agents(config: FanOutConfig) -> tuple[AgentUse, ...]:
    return (AgentUse("starts", f"participant_role:{config.role}", role=config.role),)


def code_review_agents(agent_profile_id: str | None) -> tuple[AgentUse, ...]:
    if agent_profile_id is None:
        return (AgentUse("starts", "primary"),)
    return (AgentUse("starts", f"agent_profile_id:{agent_profile_id}", profile=agent_profile_id),)


def seat_agents(config: SeatConfig) -> tuple[AgentUse, ...]:
    return (
        AgentUse(
            "seats",
            f"participant_role:{config.role}",
            profile=config.agent_profile_id,
            role=config.role,
        ),
    )


# The executors (and what they import) load when an Office kind first runs, not when the
# plugin registers its kinds: a write command that runs none (a manual move) never pays for them.


def _clear_decisions(ctx: ActionContext, config: None) -> Outcome:
    from office_plugin import executors

    return executors.clear_decisions(ctx, config)


def _queue_run_for_each_participant(ctx: ActionContext, config: FanOutConfig) -> Outcome:
    from office_plugin import executors

    return executors.queue_run_for_each_participant(ctx, config)


def _queue_run(ctx: ActionContext, config: QueueRunConfig) -> Outcome:
    from office_plugin import executors

    return executors.queue_run(ctx, config)


def _run_code_review(ctx: ActionContext, agent_profile_id: str | None) -> Outcome:
    from office_plugin import executors

    return executors.run_code_review(ctx, agent_profile_id)


def _ensure_participant_seat(ctx: ActionContext, config: SeatConfig) -> Outcome:
    from office_plugin import executors

    return executors.ensure_participant_seat(ctx, config)


def declarations() -> tuple[ActionKind, ...]:
    return (
        ActionKind(
            "clear_decisions",
            "durable",
            execute=_clear_decisions,
            validate=validate_clear,
            halts_entry_on_failure=True,
            transactional=True,
            feature="office",
        ),
        ActionKind(
            "queue_run_for_each_participant",
            "durable",
            execute=_queue_run_for_each_participant,
            validate=validate_fan_out,
            agents=fan_out_agents,
            logs_own_failures=True,
            # runs and done marker commit together: the fan-out happens exactly once
            transactional=True,
            feature="office",
        ),
        ActionKind(
            "queue_run",
            "durable",
            execute=_queue_run,
            validate=validate_queue_run,
            agents=queue_run_agents,
            feature="office",
        ),
        ActionKind(
            "run_code_review",
            "durable",
            execute=_run_code_review,
            validate=validate_code_review,
            agents=code_review_agents,
            feature="office",
        ),
        ActionKind(
            "ensure_participant_seat",
            "durable",
            execute=_ensure_participant_seat,
            validate=validate_seat,
            agents=seat_agents,
            feature="office",
        ),
    )
