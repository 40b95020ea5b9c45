"""The two workflow file formats: laneway's templates and the portable export document.

`decode_document` tells them apart and decodes either into `WorkflowDecl` values. What differs
between them is one `_Format` value (the keys each level may hold, and how a `move_to_step`
names its target); the walk over workflows, steps, triggers and actions is shared. Decoding is
strict (an unknown key is an error, as in the reference's `KnownFields(true)`) and stops at the
first problem. What is *not* checked here, on purpose:

- which kinds a trigger may declare (the reference's per-trigger allow-lists are not ours);
- whether an action kind exists (a plugin may provide it later: `laneway workflow check`
  reports it);
- guard configs, in either the ``if: {<guard>: {...}}`` form or the legacy top-level
  ``<guard>: {...}`` form (the plugin that declares the guard validates them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from core.model import DEFAULT_MAX_STEP_ARRIVALS, STAGE_TYPES, TRIGGERS
from core.workflows import linking
from core.workflows.decl import MOVE_TO_STEP, STEP_REF, WorkflowDecl
from core.workflows.fields import (
    MAX_COLOR,
    MAX_KIND,
    MAX_NAME,
    MAX_STEP_NAME,
    MAX_TEMPLATE_ID,
    At,
    agent_profile,
    boolean,
    integer,
    kind_of,
    optional_str,
    plain,
    reject_unknown,
    required_str,
    show,
    text,
)

PORTABLE_VERSION: Final = 1
PORTABLE_TYPE: Final = "kandev_workflow"
PORTABLE_STEP_REF: Final = "step_position"

_ENVELOPE_KEYS: Final = ("version", "type", "workflows")
_ACTION_KEYS: Final = ("type", "config")
_COMMON_STEP_KEYS: Final = (
    "name",
    "position",
    "color",
    "prompt",
    "stage_type",
    "is_start_step",
    "show_in_command_panel",
    "allow_manual_move",
    "auto_archive_after_hours",
    "auto_advance_requires_signal",
    "cancel_triggers_turn_complete",
    "heartbeat_seconds",
    "events",
)


@attrs.frozen
class _Format:
    """What differs between the two file formats."""

    template: bool
    workflow_keys: tuple[str, ...]
    step_keys: tuple[str, ...]
    ref_key: str
    """The `move_to_step` config key that names the target step in this format."""
    foreign_ref_key: str


_TEMPLATE: Final = _Format(
    template=True,
    workflow_keys=("id", "name", "description", "hidden", "max_step_arrivals", "steps"),
    step_keys=("id", *_COMMON_STEP_KEYS),
    ref_key=STEP_REF,
    foreign_ref_key=PORTABLE_STEP_REF,
)
_PORTABLE: Final = _Format(
    template=False,
    workflow_keys=("name", "description", "prompt", "agent_profile", "max_step_arrivals", "steps"),
    # stage_type is ours: the reference's export drops it, which is lossy (section 11.9).
    step_keys=(*_COMMON_STEP_KEYS, "agent_profile", "wip_limit", "pull_from_step_position"),
    ref_key=PORTABLE_STEP_REF,
    foreign_ref_key=STEP_REF,
)


def decode_document(data: Any, source: str = "<string>") -> list[WorkflowDecl]:
    """The workflows in an already-parsed document (e.g. a JSON body), detecting its format."""
    at = At(source)
    if data is None:
        at.fail(None, "empty file: expected a workflow template or a portable document")
    if not isinstance(data, dict):
        at.fail(None, f"expected a mapping at the top level, got {kind_of(data)}")
    if any(key in data for key in _ENVELOPE_KEYS):
        return _portable(data, at)
    if "steps" in data:
        return [_workflow(data, at, _TEMPLATE)]
    at.fail(
        None,
        "not a workflow file: expected a template (id, name, steps) "
        "or a portable document (version, type, workflows)",
    )


def _portable(data: Mapping[Any, Any], at: At) -> list[WorkflowDecl]:
    reject_unknown(at, data, _ENVELOPE_KEYS)
    version = data.get("version")
    if version is None:
        at.fail("version", "required")
    # `type(...) is int`: YAML `true` would otherwise pass as 1.
    if type(version) is not int or version != PORTABLE_VERSION:
        at.fail("version", f"unsupported version {version!r}; expected {PORTABLE_VERSION}")
    kind = data.get("type")
    if kind != PORTABLE_TYPE:
        at.fail("type", f"expected '{PORTABLE_TYPE}', got {show(kind)}")
    workflows = data.get("workflows")
    if not isinstance(workflows, list) or not workflows:
        at.fail("workflows", f"expected a non-empty list of workflows, got {show(workflows)}")
    return [
        _workflow(raw, attrs.evolve(at, prefix=f"workflows[{i}]"), _PORTABLE)
        for i, raw in enumerate(workflows)
    ]


def _workflow(raw: Any, at: At, fmt: _Format) -> WorkflowDecl:
    if not isinstance(raw, dict):
        at.fail(None, f"expected a mapping, got {kind_of(raw)}")
    name = required_str(at, raw, "name", MAX_NAME)
    at = At(at.file, workflow=name)
    reject_unknown(at, raw, fmt.workflow_keys)
    if fmt.template:
        template_id: str | None = required_str(at, raw, "id", MAX_TEMPLATE_ID)
        prompt = ""
        hidden = boolean(at, raw, "hidden", False)
    else:
        template_id = None
        prompt = optional_str(at, raw, "prompt", "")
        hidden = False
        agent_profile(at, raw)
    description = optional_str(at, raw, "description", "")
    steps = raw.get("steps")
    if not isinstance(steps, list) or not steps:
        at.fail("steps", f"expected a non-empty list of steps, got {show(steps)}")
    parsed = [_step(item, i, at, fmt) for i, item in enumerate(steps)]
    return WorkflowDecl(
        name=name,
        description=description,
        prompt=prompt,
        hidden=hidden,
        template_id=template_id,
        steps=linking.link(parsed, by_id=fmt.template, ref_key=fmt.ref_key),
        max_step_arrivals=integer(
            at, raw, "max_step_arrivals", DEFAULT_MAX_STEP_ARRIVALS, minimum=0
        ),
        source=at.file,
    )


def _step(raw: Any, index: int, wf_at: At, fmt: _Format) -> linking.ParsedStep:
    at = attrs.evolve(wf_at, prefix=f"steps[{index}]")
    if not isinstance(raw, dict):
        at.fail(None, f"expected a mapping, got {kind_of(raw)}")
    name = required_str(at, raw, "name", MAX_STEP_NAME)
    at = attrs.evolve(wf_at, step=name)
    reject_unknown(at, raw, fmt.step_keys)
    position = integer(at, raw, "position", None, minimum=0)
    key = required_str(at, raw, "id", MAX_NAME) if fmt.template else str(position)
    stage_type = optional_str(at, raw, "stage_type", "") or "custom"
    if stage_type not in STAGE_TYPES:
        at.fail("stage_type", f"'{stage_type}' is not one of {', '.join(STAGE_TYPES)}")
    prompt = optional_str(at, raw, "prompt", "")
    is_start_step = boolean(at, raw, "is_start_step", False)
    fields: dict[str, Any] = {
        "name": name,
        "position": position,
        "is_start_step": is_start_step,
        "allow_manual_move": boolean(at, raw, "allow_manual_move", True),
        "wip_limit": integer(at, raw, "wip_limit", 0, minimum=0),
        # The reference trims template prompts (a `|` block ends in a newline).
        "prompt": prompt.strip() if fmt.template else prompt,
        "stage_type": stage_type,
        "color": optional_str(at, raw, "color", "", MAX_COLOR),
        "show_in_command_panel": boolean(at, raw, "show_in_command_panel", False),
        "auto_archive_after_hours": integer(at, raw, "auto_archive_after_hours", 0, minimum=0),
        "auto_advance_requires_signal": boolean(at, raw, "auto_advance_requires_signal", False),
        "cancel_triggers_turn_complete": boolean(at, raw, "cancel_triggers_turn_complete", False),
        "heartbeat_seconds": _heartbeat(at, raw),
    }
    pull_from = None
    if raw.get("pull_from_step_position") is not None:
        pull_from = integer(at, raw, "pull_from_step_position", None)
    if not fmt.template:
        agent_profile(at, raw)
    return linking.ParsedStep(
        at=at,
        fields=fields,
        key=key,
        position=position,
        is_start_step=is_start_step,
        pull_from=pull_from,
        actions=_events(at, raw.get("events"), fmt),
    )


def _heartbeat(at: At, raw: Mapping[Any, Any]) -> int | None:
    """`heartbeat_seconds`: a positive whole number of seconds, or absent (no heartbeat)."""
    if raw.get("heartbeat_seconds") is None:
        return None
    return integer(at, raw, "heartbeat_seconds", None, minimum=1)


# --- events -------------------------------------------------------------------------------------


def _events(at: At, raw: Any, fmt: _Format) -> dict[str, list[dict[str, Any]]]:
    """Trigger -> actions as `{type, config}` mappings; triggers with no actions are left out."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        at.fail("events", f"expected a mapping of trigger to actions, got {kind_of(raw)}")
    events: dict[str, list[dict[str, Any]]] = {}
    for trigger, actions in raw.items():
        field = f"events.{trigger}"
        if trigger not in TRIGGERS:
            at.fail(field, f"unknown trigger; expected one of {', '.join(TRIGGERS)}")
        if actions is None:
            continue
        if not isinstance(actions, list):
            at.fail(field, f"expected a list of actions, got {kind_of(actions)}")
        parsed = [_action(at, f"{field}[{i}]", action, fmt) for i, action in enumerate(actions)]
        if parsed:
            events[trigger] = parsed
    return events


def _action(at: At, path: str, raw: Any, fmt: _Format) -> dict[str, Any]:
    if not isinstance(raw, dict):
        at.fail(path, f"expected a mapping with a 'type', got {kind_of(raw)}")
    for key in raw:
        if key not in _ACTION_KEYS:
            at.fail(f"{path}.{key}", "unknown key; an action has only 'type' and 'config'")
    kind = raw.get("type")
    if kind is None:
        at.fail(f"{path}.type", "required")
    if not isinstance(kind, str):
        at.fail(f"{path}.type", f"expected a string, got {kind_of(kind)}")
    if not kind.strip():
        at.fail(f"{path}.type", "must not be empty")
    text(at, f"{path}.type", kind, MAX_KIND)
    config = raw.get("config")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        at.fail(f"{path}.config", f"expected a mapping, got {kind_of(config)}")
    plain(at, f"{path}.config", config)
    if kind == MOVE_TO_STEP:
        _move_target(at, f"{path}.config", config, fmt)
    return {"type": kind, "config": config}


def _move_target(at: At, path: str, config: Mapping[str, Any], fmt: _Format) -> None:
    if fmt.foreign_ref_key in config:
        where = "a template" if fmt.template else "the portable format"
        at.fail(
            f"{path}.{fmt.foreign_ref_key}",
            f"{where} names the target step with {fmt.ref_key}, not {fmt.foreign_ref_key}",
        )
    ref = config.get(fmt.ref_key)
    if ref is None:
        at.fail(f"{path}.{fmt.ref_key}", "required: move_to_step needs a target step")
    if fmt.template and not isinstance(ref, str):
        at.fail(f"{path}.{fmt.ref_key}", f"expected a step id (string), got {kind_of(ref)}")
    if not fmt.template and type(ref) is not int:
        at.fail(f"{path}.{fmt.ref_key}", f"expected a step position (integer), got {kind_of(ref)}")
