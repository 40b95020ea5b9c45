"""Writing workflows in the portable format (`version: 1`, `type: kandev_workflow`).

Unlike the reference's export, nothing declared is dropped: all eleven triggers and the
step's `stage_type` are written, so importing an export gives back the same steps and
events (with new ids). Step ids never leave the database: `move_to_step` targets and the
feeder step are written as positions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import yaml

from core.model import DEFAULT_MAX_STEP_ARRIVALS, TRIGGERS, Step, Workflow
from core.workflows.decl import MOVE_TO_STEP, STEP_REF, WorkflowFileError, rename_key
from core.workflows.load import PORTABLE_STEP_REF, PORTABLE_TYPE, PORTABLE_VERSION


def export_document(workflows: Iterable[Workflow]) -> dict[str, Any]:
    """The portable document holding `workflows`, ready for `to_yaml` or `json.dumps`."""
    return {
        "version": PORTABLE_VERSION,
        "type": PORTABLE_TYPE,
        "workflows": [_workflow(wf) for wf in workflows],
    }


def _workflow(wf: Workflow) -> dict[str, Any]:
    steps = sorted(wf.steps, key=lambda s: s.position)
    positions = {s.id: s.position for s in steps}

    def position_of(step: Step, ref: Any, field: str) -> int:
        try:
            return positions[ref]
        except (KeyError, TypeError):
            raise WorkflowFileError(
                f"no step of this workflow has id '{ref}'",
                workflow=wf.name,
                step=step.name,
                field=field,
            ) from None

    out: dict[str, Any] = {"name": wf.name}
    if wf.description:
        out["description"] = wf.description
    if wf.prompt:
        out["prompt"] = wf.prompt
    if wf.max_step_arrivals != DEFAULT_MAX_STEP_ARRIVALS:
        out["max_step_arrivals"] = wf.max_step_arrivals
    out["steps"] = [_step(s, position_of) for s in steps]
    return out


_PositionOf = Callable[[Step, Any, str], int]


def _step(step: Step, position_of: _PositionOf) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": step.name,
        "position": step.position,
        "color": step.color,
        "stage_type": step.stage_type,
        "is_start_step": step.is_start_step,
        "show_in_command_panel": step.show_in_command_panel,
        "allow_manual_move": step.allow_manual_move,
        "auto_archive_after_hours": step.auto_archive_after_hours,
        "auto_advance_requires_signal": step.auto_advance_requires_signal,
        "cancel_triggers_turn_complete": step.cancel_triggers_turn_complete,
        "wip_limit": step.wip_limit,
    }
    if step.pull_from_step_id is not None:
        out["pull_from_step_position"] = position_of(
            step, step.pull_from_step_id, "pull_from_step_id"
        )
    if step.prompt:
        out["prompt"] = step.prompt
    if step.heartbeat_seconds is not None:
        out["heartbeat_seconds"] = step.heartbeat_seconds
    events: dict[str, list[dict[str, Any]]] = {}
    # Triggers in the canonical order, then any the declaration holds that we do not know
    # (a store written by a newer laneway): exporting them is better than losing them.
    triggers = [t for t in TRIGGERS if t in step.events]
    triggers += [t for t in step.events if t not in TRIGGERS]
    for trigger in triggers:
        actions = []
        for action in step.actions(trigger):
            entry: dict[str, Any] = {"type": action.kind}
            config = dict(action.config)
            if action.kind == MOVE_TO_STEP and STEP_REF in config:
                field = f"events.{trigger}[{action.position}].config.{STEP_REF}"
                target = position_of(step, config[STEP_REF], field)
                config = rename_key(config, STEP_REF, PORTABLE_STEP_REF, target)
            if config:
                entry["config"] = config
            actions.append(entry)
        if actions:
            events[trigger] = actions
    if events:
        out["events"] = events
    return out


class _Dumper(yaml.SafeDumper):
    """Readable output: multi-line prompts as `|` blocks, and no `&id001` anchors when two
    configs happen to share an object."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def to_yaml(document: dict[str, Any]) -> str:
    """`document` as YAML text, keys in the order they were built."""
    return yaml.dump(
        document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False
    )
