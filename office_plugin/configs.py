"""The config values of Office's kinds and their validators: what a declaration's `config`
becomes, read by the declarations (office_plugin.kinds) and the executors alike (one module
below both, so neither imports the other back).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plugins.api import PARTICIPANT_ROLES, ConfigError

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
