"""The JSON shapes of CLI.md, in one place: what `laneway --json` prints and what `laneway
serve` answers are written by these functions, so the two can never drift apart.

A task, run, session, participant, decision or profile is its attrs value as a dict (field
names already match the table columns); a workflow and a step have the explicit shapes CLI.md
spells out, so a column added to the model does not silently change the contract.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from core.model import Marker, Step, StepEntry, Workflow
from core.store.rows import encode_events

STEP_KEYS = (
    "id",
    "workflow_id",
    "name",
    "position",
    "is_start_step",
    "allow_manual_move",
    "wip_limit",
    "pull_from_step_id",
    "agent_profile_id",
    "prompt",
    "stage_type",
)


def plain(value: Any) -> Any:
    """`value` with attrs instances, mappings and tuples made JSON-ready, recursively."""
    if attrs.has(type(value)):
        return {k: plain(v) for k, v in attrs.asdict(value, recurse=False).items()}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def step_json(step: Step) -> dict[str, Any]:
    out = {key: getattr(step, key) for key in STEP_KEYS}
    out["events"] = encode_events(step.events)
    return out


def workflow_json(workflow: Workflow) -> dict[str, Any]:
    return {
        "id": workflow.id,
        "name": workflow.name,
        "description": workflow.description,
        "hidden": workflow.hidden,
        "max_step_arrivals": workflow.max_step_arrivals,
        "steps": [step_json(s) for s in sorted(workflow.steps, key=lambda s: s.position)],
    }


def _cause(raw: str | None) -> Any:
    # Kinds record structured accounting (e.g. the fan-out's counts) as JSON text; a reader
    # wants the object, but a free-text cause must survive as the string it is.
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def entry_json(entry: StepEntry, markers: Iterable[Marker]) -> dict[str, Any]:
    return {
        "id": entry.id,
        "task_id": entry.task_id,
        "step_id": entry.step_id,
        "entry_seq": entry.entry_seq,
        "entry_path": entry.entry_path,
        "declaration_digest": entry.declaration_digest,
        "terminal": entry.terminal,
        "markers": [
            {
                "position": m.position,
                "kind": m.kind,
                "state": m.state,
                "epoch": m.epoch,
                "reason": m.reason,
                "cause": _cause(m.cause),
            }
            for m in markers
        ],
    }


def trigger_json(result: Mapping[str, Any]) -> dict[str, Any]:
    """A turn's result: `{"task", "transitioned", "from_step_id", "to_step_id"}`, plus
    `refusals` (`[{"guard", "reason"}]`: the guards that kept a move back) and `halted` (the
    runaway-loop limit kept it back)."""
    return {
        "task": plain(result["task"]),
        "transitioned": bool(result["transitioned"]),
        "from_step_id": result["from_step_id"],
        "to_step_id": result["to_step_id"],
        "refusals": list(result.get("refusals", ())),
        "halted": bool(result.get("halted", False)),
    }


def decision_result_json(result: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded verdict: `{"decision", "transitioned", "to_step_id"}`, plus `refusals` and
    `halted` as for a turn."""
    return {
        "decision": plain(result["decision"]),
        "transitioned": bool(result["transitioned"]),
        "to_step_id": result["to_step_id"],
        "refusals": list(result.get("refusals", ())),
        "halted": bool(result.get("halted", False)),
    }


def template_json(decl: Any) -> dict[str, Any]:
    """A shipped template as `workflow templates` lists it."""
    return {
        "id": decl.template_id,
        "name": decl.name,
        "steps": len(decl.steps),
        "hidden": decl.hidden,
    }
