"""core's own kinds: the moves and switch_workflow. Registered as the plugin named "core",
which cannot be blocked. They change a task's step, so none of them is an on_enter kind."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import attrs
import pluggy

from core import transition
from core.errors import LanewayError
from core.kinds import ActionContext, ActionFailed, ActionKind, ConfigError, Outcome

if TYPE_CHECKING:
    from core.host import Host

hookimpl = pluggy.HookimplMarker("laneway")


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
    # core's own kind runs inside the host: its services are the whole Host, not a plugin's view
    host = cast("Host", ctx.services)
    try:
        workflow = host.workflows.get(target.workflow)
        step = host.workflows.step(workflow, target.step) if target.step else workflow.start_step
    except LanewayError as exc:
        raise ActionFailed(str(exc)) from None
    if step is None:
        raise ActionFailed(f"workflow {workflow.name!r} has no steps")
    transition.move(host, ctx.task.id, step.id, path="E4", label="switch_workflow")
    return Outcome.done()


def _move(_ctx: ActionContext, _config: Any) -> None:
    """Moves are chosen by the engine, never executed as actions."""


KINDS = (
    ActionKind("move_to_next", "structural", execute=_move, trigger_ok=_not_on_enter),
    ActionKind("move_to_previous", "structural", execute=_move, trigger_ok=_not_on_enter),
    ActionKind(
        "move_to_step",
        "structural",
        execute=_move,
        validate=_validate_move_to_step,
        trigger_ok=_not_on_enter,
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
