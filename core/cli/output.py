"""Turning values into what the `laneway` command prints: JSON shapes (CLI.md) and text lines.

The JSON converters live in `core.shapes`, shared with `laneway serve`; they are re-exported
here for the commands.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import Any

import click

from core.model import AgentProfile, Marker, StepEntry, Task, Workflow
from core.shapes import (
    STEP_KEYS,
    decision_result_json,
    entry_json,
    plain,
    step_json,
    template_json,
    trigger_json,
    workflow_json,
)

__all__ = [
    "STEP_KEYS",
    "decision_result_json",
    "emit",
    "entry_json",
    "entry_lines",
    "plain",
    "profile_line",
    "step_json",
    "task_line",
    "template_json",
    "trigger_json",
    "workflow_json",
    "workflow_lines",
]


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


def task_line(task: Task) -> str:
    flags = " archived" if task.archived_at else ""
    return (
        f"{task.id}  {task.title!r}  step={_or_dash(task.workflow_step_id)} "
        f"state={task.state}{flags}"
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
