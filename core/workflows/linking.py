"""Cross-step linking: the rules that span a workflow's steps, and references made into keys.

Steps arrive with their own fields checked (`ParsedStep`); `link` refuses duplicate names,
positions, ids and start steps, then turns every reference to another step (`move_to_step`'s
target, `pull_from_step_position`) into that step's key. Templates refer to steps by id, the
portable format by position.
"""

from __future__ import annotations

from typing import Any

import attrs

from core.store.rows import decode_events
from core.workflows.decl import MOVE_TO_STEP, STEP_REF, StepDecl, rename_key
from core.workflows.fields import At


@attrs.frozen
class ParsedStep:
    """A step whose own fields are valid; references to other steps are not resolved yet."""

    at: At
    fields: dict[str, Any]
    key: str
    position: int
    is_start_step: bool
    pull_from: int | None
    actions: dict[str, list[dict[str, Any]]]


def link(parsed: list[ParsedStep], *, by_id: bool, ref_key: str) -> tuple[StepDecl, ...]:
    """Cross-step rules, then every reference turned into a step key."""
    by_position: dict[int, ParsedStep] = {}
    by_key: dict[str, ParsedStep] = {}
    by_name: dict[str, ParsedStep] = {}
    start: ParsedStep | None = None
    for step in parsed:
        # Steps are found by name, case-insensitively (`task move T Review`): two steps with
        # one name would make one of them unreachable.
        name = step.fields["name"].casefold()
        other = by_name.get(name)
        if other is not None:
            step.at.fail(
                "name",
                f"duplicate step name; the step at position {other.position} is called "
                f"'{other.fields['name']}'",
            )
        by_name[name] = step
        other = by_position.get(step.position)
        if other is not None:
            step.at.fail(
                "position",
                f"duplicate position {step.position}; step '{other.fields['name']}' has it too",
            )
        by_position[step.position] = step
        other = by_key.get(step.key)
        if other is not None and by_id:
            step.at.fail(
                "id", f"duplicate step id '{step.key}'; step '{other.fields['name']}' has it too"
            )
        by_key[step.key] = step
        if step.is_start_step:
            if start is not None:
                step.at.fail(
                    "is_start_step", f"step '{start.fields['name']}' is already the start step"
                )
            start = step

    def target(step: ParsedStep, field: str, ref: Any) -> str:
        found = by_key.get(ref) if by_id else by_position.get(ref)
        if found is None:
            what = f"has id '{ref}'" if by_id else f"is at position {ref}"
            step.at.fail(field, f"no step {what}")
        return found.key

    decls = []
    for step in parsed:
        pull_from = None
        if step.pull_from is not None:
            if step.pull_from == step.position:
                step.at.fail("pull_from_step_position", "a step cannot pull from itself")
            pull_from = target(step, "pull_from_step_position", step.pull_from)
        raw_events: dict[str, list[dict[str, Any]]] = {}
        for trigger, actions in step.actions.items():
            raw_events[trigger] = []
            for i, action in enumerate(actions):
                config = action["config"]
                if action["type"] == MOVE_TO_STEP:
                    field = f"events.{trigger}[{i}].config.{ref_key}"
                    key = target(step, field, config[ref_key])
                    config = rename_key(config, ref_key, STEP_REF, key)
                raw_events[trigger].append({"type": action["type"], "config": config})
        decls.append(
            StepDecl(
                key=step.key, pull_from=pull_from, events=decode_events(raw_events), **step.fields
            )
        )
    return tuple(sorted(decls, key=lambda s: s.position))
