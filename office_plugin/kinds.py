"""Office's durable kinds: their declarations (the configs and validators are in configs.py).

Declared whatever the host's features, so that a disabled Office still makes them recognised
(and skipped with a warning) rather than unknown; the host drops their executors then.
"""

from __future__ import annotations

from office_plugin.configs import (
    FanOutConfig,
    QueueRunConfig,
    SeatConfig,
    validate_clear,
    validate_code_review,
    validate_fan_out,
    validate_queue_run,
    validate_seat,
)
from plugins.api import ActionContext, ActionKind, AgentUse, Outcome


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
