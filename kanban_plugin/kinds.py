"""The kanban session kinds: declarations, config validators and executors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plugins.api import ALL_PATHS, ActionContext, ActionKind, AgentUse, ConfigError, build_prompt

RULE_OPERATIONS = ("set", "keep", "restore_original")


def _session_id(ctx: ActionContext) -> str:
    assert ctx.session is not None, "the dispatcher runs session kinds only with a session"
    return ctx.session.id


def _no_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return config


def reset_agent_context(ctx: ActionContext, _config: Any) -> None:
    """Restart the agent's conversation; runtime configuration (modes) survives."""
    ctx.services.sessions.record_effect(
        _session_id(ctx), context_resets=[{"step_id": ctx.step.id, "entry_path": ctx.entry_path}]
    )
    ctx.logger.info("agent context reset")


@attrs.frozen
class ConfigureRule:
    agent_name: str
    operation: str
    model: str | None = None
    config_options: Mapping[str, str] = attrs.field(factory=dict)


def validate_configure_session(config: Mapping[str, Any]) -> tuple[ConfigureRule, ...]:
    rules = config.get("rules")
    if not isinstance(rules, list) or not rules:
        raise ConfigError("configure_session needs a non-empty rules list", field="config.rules")
    parsed: list[ConfigureRule] = []
    seen: set[str] = set()
    for i, rule in enumerate(rules):
        where = f"config.rules[{i}]"
        if not isinstance(rule, Mapping):
            raise ConfigError(f"{where} must be a mapping", field=where)
        name, op = rule.get("agent_name"), rule.get("operation")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.agent_name is required", field=f"{where}.agent_name")
        if name in seen:
            raise ConfigError(f"{where}.agent_name {name!r} repeats", field=f"{where}.agent_name")
        seen.add(name)
        if op not in RULE_OPERATIONS:
            raise ConfigError(
                f"{where}.operation must be one of {', '.join(RULE_OPERATIONS)}",
                field=f"{where}.operation",
            )
        model, options = rule.get("model"), rule.get("config_options") or {}
        if not isinstance(options, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in options.items()
        ):
            raise ConfigError(
                f"{where}.config_options must map strings to strings",
                field=f"{where}.config_options",
            )
        if op == "set" and not model and not options:
            raise ConfigError(f"{where}: set needs a model or config_options", field=where)
        if op != "set" and (model or options):
            raise ConfigError(f"{where}: {op} takes no model or config_options", field=where)
        parsed.append(ConfigureRule(name, str(op), model, dict(options)))
    return tuple(parsed)


def configure_session(ctx: ActionContext, rules: tuple[ConfigureRule, ...]) -> None:
    ctx.services.sessions.record_effect(
        _session_id(ctx), configured=[attrs.asdict(rule) for rule in rules]
    )


def enable_plan_mode(ctx: ActionContext, _config: Any) -> None:
    ctx.services.sessions.record_effect(_session_id(ctx), plan_mode=True)


def disable_plan_mode(ctx: ActionContext, _config: Any) -> None:
    ctx.services.sessions.record_effect(_session_id(ctx), plan_mode=False)


def validate_session_mode(config: Mapping[str, Any]) -> str:
    mode = config.get("mode")
    if not isinstance(mode, str) or not mode.strip():
        raise ConfigError("set_session_mode needs a non-empty config.mode", field="config.mode")
    return mode


def set_session_mode(ctx: ActionContext, mode: str) -> None:
    ctx.services.sessions.record_effect(_session_id(ctx), session_mode=mode)


def validate_workflow_data(config: Mapping[str, Any]) -> tuple[str, Any]:
    key = config.get("key")
    if not isinstance(key, str) or not key:
        raise ConfigError("set_workflow_data needs config.key", field="config.key")
    return key, config.get("value")


def set_workflow_data(ctx: ActionContext, item: tuple[str, Any]) -> None:
    key, value = item
    ctx.services.sessions.record_effect(_session_id(ctx), workflow_data={key: value})


def auto_start_agent(ctx: ActionContext, _config: Any) -> None:
    """Start the agent on the step's prompt (last, after every other entry action).

    An agent running outside laneway (an external session) is handed the prompt; an agent
    laneway runs gets a `task_assigned` run, which the worker executes.
    """
    host = ctx.services
    workflow = host.workflows.by_id(ctx.step.workflow_id)
    prompt = build_prompt(workflow.prompt, ctx.step.prompt, ctx.task.description)
    assert ctx.session is not None
    if ctx.session.external:
        host.sessions.record_effect(
            ctx.session.id, prompts=[{"step_id": ctx.step.id, "prompt": prompt}]
        )
        return
    agent = host.runs.primary_agent(ctx.task, ctx.step.id) or ctx.session.agent_profile_id
    if agent == ctx.session.agent_profile_id and host.sessions.turn_starting(ctx.session.id):
        # the move came from this agent's turn starting (a person's message at Review): that
        # turn is the one; the step's prompt again would be a second turn nobody asked for
        ctx.logger.info("auto_start_agent: the agent's turn is starting now; nothing queued")
        return
    if agent is None:
        ctx.logger.warning("auto_start_agent: no agent resolves for the step; nothing started")
        return
    if not ctx.wakes(agent):
        ctx.logger.debug("auto_start_agent: its own comment does not wake the agent")
        return
    if host.runs.assign(ctx.task, ctx.step.id, agent) is None:
        ctx.logger.info("auto_start_agent: the task is blocked; its agent starts once unblocked")
        return
    host.sessions.record_effect(ctx.session.id, prompts=[{"step_id": ctx.step.id, "queued": True}])


KINDS = (
    ActionKind(
        "reset_agent_context",
        "session",
        execute=reset_agent_context,
        validate=_no_config,
        placement="first",
        once_per_entry=True,
        description="restart the agent with a fresh conversation",
    ),
    ActionKind(
        "configure_session",
        "session",
        execute=configure_session,
        validate=validate_configure_session,
        placement="second",
        once_per_entry=True,
        paths=ALL_PATHS - {"E4"},
        description="set, keep or restore the agent's model and options",
    ),
    ActionKind("enable_plan_mode", "session", execute=enable_plan_mode, validate=_no_config),
    ActionKind("disable_plan_mode", "session", execute=disable_plan_mode, validate=_no_config),
    ActionKind(
        "set_session_mode", "session", execute=set_session_mode, validate=validate_session_mode
    ),
    ActionKind(
        "set_workflow_data", "session", execute=set_workflow_data, validate=validate_workflow_data
    ),
    ActionKind(
        "auto_start_agent",
        "session",
        execute=auto_start_agent,
        validate=_no_config,
        placement="last",
        description="send the step prompt to the agent",
        agents=lambda _config: (AgentUse("starts", "primary"),),
        starts_agent=True,
    ),
)
