"""core's own kinds: the moves and switch_workflow. Registered as the plugin named "core",
which cannot be blocked. They change a task's step, so none of them is an on_enter kind.

The move kinds say so (`ActionKind.moves`): the engine chooses one and resolves its target here
(`resolve_target`), never executes it. switch_workflow's effect is the task service's
(`ctx.services.tasks.enter_workflow`), reached like any plugin reaches a service."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pluggy

from core.errors import LanewayError
from core.model import ActionDecl, Step, Workflow
from core.plugin.kinds import ActionContext, ActionFailed, ActionKind, ConfigError, Outcome

hookimpl = pluggy.HookimplMarker("laneway")

SWITCH_LABEL = "switch_workflow"
"""The route an E4 move records in session history (the kind's own name)."""


def _not_on_enter(trigger: str) -> bool:
    return trigger != "on_enter"


def _validate_move_to_step(config: Mapping[str, Any]) -> Mapping[str, Any]:
    if not config.get("step_id") and config.get("step_position") is None:
        raise ConfigError("move_to_step needs config.step_id", field="config.step_id")
    return config


@attrs.frozen
class SwitchTarget:
    workflow: str
    step: str | None = None


def _validate_switch(config: Mapping[str, Any]) -> SwitchTarget:
    workflow = config.get("workflow")
    if not isinstance(workflow, str) or not workflow:
        raise ConfigError("switch_workflow needs config.workflow", field="config.workflow")
    step = config.get("step")
    if step is not None and not isinstance(step, str):
        raise ConfigError("switch_workflow config.step must be a string", field="config.step")
    return SwitchTarget(workflow, step)


def _switch_workflow(ctx: ActionContext, target: SwitchTarget) -> Outcome:
    """Entry path E4: into another workflow's step (default its start step)."""
    # core's own kind runs inside the host, whose task service is wider than a plugin's view
    services: Any = ctx.services
    try:
        services.tasks.enter_workflow(ctx.task.id, workflow=target.workflow, step=target.step)
    except LanewayError as exc:
        raise ActionFailed(str(exc)) from None
    return Outcome.done()


def _move(_ctx: ActionContext, _config: Any) -> None:
    """Moves are chosen by the engine, never executed as actions."""


def resolve_target(workflow: Workflow, step: Step, decl: ActionDecl) -> Step:
    """Where a move declared at `step` goes."""
    ordered = sorted(workflow.steps, key=lambda s: s.position)
    index = next(i for i, s in enumerate(ordered) if s.id == step.id)
    if decl.kind == "move_to_next":
        if index + 1 >= len(ordered):
            raise LanewayError(f"step {step.name!r} is the last step: no next step")
        return ordered[index + 1]
    if decl.kind == "move_to_previous":
        if index == 0:
            raise LanewayError(f"step {step.name!r} is the first step: no previous step")
        return ordered[index - 1]
    ref = str(decl.config.get("step_id", ""))
    target = workflow.step(ref)
    if target is None:
        raise LanewayError(f"step {step.name!r}: move_to_step names unknown step {ref!r}")
    return target


KINDS = (
    ActionKind("move_to_next", "structural", execute=_move, trigger_ok=_not_on_enter, moves=True),
    ActionKind(
        "move_to_previous", "structural", execute=_move, trigger_ok=_not_on_enter, moves=True
    ),
    ActionKind(
        "move_to_step",
        "structural",
        execute=_move,
        validate=_validate_move_to_step,
        trigger_ok=_not_on_enter,
        moves=True,
    ),
    ActionKind(
        "switch_workflow",
        "structural",
        execute=_switch_workflow,
        validate=_validate_switch,
        trigger_ok=_not_on_enter,
    ),
)


@hookimpl
def laneway_register_action_kinds(register: Callable[[ActionKind], None]) -> None:
    for kind in KINDS:
        register(kind)
