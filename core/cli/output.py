"""Turning values into what the `laneway` command prints: JSON shapes (CLI.md) and text lines.

The JSON converters here are the one place the command's output contract is written down in
code: a task, run, session, participant, decision or profile is its attrs value as a dict
(field names already match the table columns); a workflow and a step have the explicit shapes
CLI.md spells out, so a column added to the model does not silently change the contract.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import click

from core.errors import LanewayError
from core.model import AgentProfile, Marker, Step, StepEntry, Task, Workflow
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


def why_not(result: Mapping[str, Any]) -> str:
    """Why no move happened, for a text line: the refusing guards and their reasons."""
    parts = [f"guard {r['guard']}: {r['reason']}" for r in result.get("refusals", ())]
    if result.get("halted"):
        parts.append("stopped by the runaway-loop limit (a person's move resumes it)")
    return f" ({'; '.join(parts)})" if parts else ""


StepNames = Mapping[str, str]
"""step id -> step name, for lines that name steps."""


def names_of(
    host: Any, step_ids: Iterable[str | None], profile_ids: Iterable[str | None]
) -> dict[str, str]:
    """Names for step and agent-profile ids (read while the host is open); an id that does
    not resolve is left out, and the line prints the id."""
    names: dict[str, str] = {}
    for step_id in {s for s in step_ids if s}:
        try:
            _wf, step = host.workflows.step_by_id(step_id)
        except LanewayError:
            continue
        names[step_id] = step.name
    wanted = {p for p in profile_ids if p}
    if wanted:
        names.update({p.id: p.name for p in host.profiles.list() if p.id in wanted})
    return names


def step_names(host: Any, *tasks: Task) -> dict[str, str]:
    """The names of the workflows' steps the tasks are in (read while the host is open)."""
    names: dict[str, str] = {}
    for task in tasks:
        if task.workflow_id and task.workflow_step_id and task.workflow_step_id not in names:
            try:
                workflow = host.workflows.by_id(task.workflow_id)
            except LanewayError:  # a name is a nicety; the id still prints
                continue
            names.update({s.id: s.name for s in workflow.steps})
    return names


# -- printing ------------------------------------------------------------------------------


def emit(as_json: bool, value: Any, lines: Iterable[str]) -> None:
    """Print `value` as exactly one JSON value, or `lines` as text, on stdout."""
    if as_json:
        click.echo(json.dumps(plain(value), indent=2, ensure_ascii=False))
        return
    for line in lines:
        click.echo(line)


def _or_dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def task_line(task: Task, names: StepNames | None = None) -> str:
    names = names or {}

    def name(step_id: str | None) -> str:
        return names.get(step_id, step_id) if step_id else "-"

    flags = " archived" if task.archived_at else ""
    if not task.wip_admitted and task.queued_for_step_id:
        flags += " (queued: the step is full)"
    if task.loop_halted_step_id:
        flags += (
            f" HALTED: runaway loop at {name(task.loop_halted_step_id)}; "
            "triggers no longer move it until a person does"
        )
    return (
        f"{task.id}  {task.title!r}  step={name(task.workflow_step_id)} state={task.state}{flags}"
    )


def workflow_lines(workflow: Workflow, *, with_steps: bool) -> list[str]:
    hidden = " [hidden]" if workflow.hidden else ""
    lines = [f"{workflow.id}  {workflow.name}  ({len(workflow.steps)} steps){hidden}"]
    if with_steps:
        for step in sorted(workflow.steps, key=lambda s: s.position):
            start = " [start]" if step.is_start_step else ""
            lines.append(f"  {step.position}. {step.name}  {step.id}  {step.stage_type}{start}")
    return lines


def profile_line(profile: AgentProfile) -> str:
    return (
        f"{profile.id}  {profile.name}  role={profile.role}  command={shlex.join(profile.command)}"
    )


def entry_lines(entry: StepEntry, markers: Iterable[Marker]) -> list[str]:
    state = "terminal" if entry.terminal else "open"
    head = (
        f"{entry.id}  task={entry.task_id}  step={entry.step_id}  "
        f"#{entry.entry_seq} {entry.entry_path} {state}"
    )
    lines = [head]
    for m in markers:
        why = f" ({m.reason})" if m.reason else ""
        lines.append(f"  [{m.position}] {m.kind}: {m.state}{why}")
    return lines
