"""What a workflow wants of an agent's conversation, read from what the session kinds recorded.

The session kinds (`set_session_mode`, `enable_plan_mode`, `disable_plan_mode`,
`configure_session`, `reset_agent_context`) write into the session's metadata; the runtime reads
it here before every turn and reconciles the agent with it (AGENTS.md "A session is one
conversation"). Plain functions over plain values: the same answer for ACP and exec agents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

PLAN_INSTRUCTION: Final = (
    "You are in plan mode. Do not change any file or run anything that changes state: "
    "read what you need, then answer with a plan of the changes you would make."
)
"""Heads every prompt while plan mode is on and the agent offers no `plan` mode of its own."""

PLAN_MODE: Final = "plan"


@attrs.frozen
class Desired:
    """The conversation the workflow wants; None/empty means "whatever the agent has"."""

    mode: str | None = None
    plan_mode: bool = False
    model: str | None = None
    options: Mapping[str, str] = attrs.field(factory=dict)
    restore_original: bool = False
    """The last configure rule for this agent said restore_original: back to how it began."""
    resets: int = 0
    """How many times `reset_agent_context` ran on the session (each asks for a fresh start)."""


def desired(metadata: Mapping[str, Any], profile_name: str) -> Desired:
    """The desired state of `profile_name`'s conversation from a session's `metadata`.

    configure_session rules apply in the order they were recorded: `set` adds a model and
    options, `restore_original` drops what earlier rules set, `keep` changes nothing."""
    model: str | None = None
    options: dict[str, str] = {}
    restore = False
    for rule in metadata.get("configured") or ():
        if not isinstance(rule, Mapping):
            continue
        if str(rule.get("agent_name", "")).casefold() != profile_name.casefold():
            continue
        operation = rule.get("operation")
        if operation == "set":
            model = rule.get("model") or model
            options.update(rule.get("config_options") or {})
            restore = False
        elif operation == "restore_original":
            model, options, restore = None, {}, True
    mode = metadata.get("session_mode")
    resets = metadata.get("context_resets") or ()
    return Desired(
        mode=mode if isinstance(mode, str) and mode else None,
        plan_mode=bool(metadata.get("plan_mode")),
        model=model,
        options=options,
        restore_original=restore,
        resets=len(resets) if isinstance(resets, list | tuple) else 0,
    )


def with_plan_instruction(prompt: str) -> str:
    return f"{PLAN_INSTRUCTION}\n\n{prompt}"


def option_var(name: str) -> str:
    """`LANEWAY_OPTION_<NAME>`: the option's name upper-cased, anything else than A-Z0-9 as _."""
    return "LANEWAY_OPTION_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


def exec_env(want: Desired, *, fresh: bool) -> dict[str, str]:
    """What an exec agent is told of the desired state (AGENTS.md's table, the exec column)."""
    env: dict[str, str] = {}
    if want.mode:
        env["LANEWAY_SESSION_MODE"] = want.mode
    if want.plan_mode:
        env["LANEWAY_PLAN_MODE"] = "1"
    if want.model:
        env["LANEWAY_MODEL"] = want.model
    for name, value in want.options.items():
        env[option_var(name)] = value
    if fresh:
        env["LANEWAY_FRESH_CONTEXT"] = "1"
    return env
