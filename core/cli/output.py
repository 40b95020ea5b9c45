"""Turning values into what the `laneway` command prints: JSON shapes (CLI.md) and text lines.

The JSON converters live in `core.shapes`, shared with `laneway serve`; they are re-exported
here for the commands.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

import click

from core.errors import LanewayError
from core.model import AgentProfile, Item, Marker, Session, StepEntry, Task, Workflow
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
    "item_line",
    "plain",
    "profile_line",
    "session_line",
    "step_json",
    "task_line",
    "template_json",
    "trigger_json",
    "workflow_json",
    "workflow_lines",
]


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
            names[workflow.id] = workflow.name
    return names


# -- printing ------------------------------------------------------------------------------


def emit(as_json: bool, value: Any, lines: Iterable[str]) -> None:
    """Print `value` as exactly one JSON value, or `lines` as text, on stdout."""
    if as_json:
        click.echo(json.dumps(plain(value), indent=2, ensure_ascii=False))
        return
    for line in lines:
        click.echo(line)


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
    if task.parent_id:
        flags += f" parent={task.parent_id[-8:]}"
    if task.blocked_by:
        # every blocker it was given, finished ones too: `task show` says which still hold
        flags += f" blockers={','.join(b[-8:] for b in task.blocked_by)}"
    workflow = names.get(task.workflow_id, task.workflow_id) if task.workflow_id else "-"
    return (
        f"{task.id}  {task.title!r}  workflow={_word(workflow)} "
        f"step={_word(name(task.workflow_step_id))} state={task.state}{flags}"
    )


def workspace_lines(task: Task) -> list[str]:
    """`task show`'s lines about what the task's branch started from and what became of it
    (merged, pushed, a merge that conflicted); the branch itself is on the line above."""
    record = task.workspace
    if record is None:
        return []
    base = str(record.get("base_commit", ""))[:12]
    lines = [f"  base: {record.get('base_branch')} at {base}"]
    merge = record.get("merge")
    if merge:
        lines.append(
            f"  merged into {merge.get('into')} ({merge.get('strategy')}) as "
            f"{str(merge.get('commit', ''))[:12]} at {merge.get('at')}"
        )
    push = record.get("push")
    if push:
        sent = str(push.get("commit", ""))[:12]
        lines.append(f"  pushed {sent} to {push.get('remote')} at {push.get('at')}")
    conflict = record.get("conflict")
    if conflict:
        paths = ", ".join(str(p) for p in conflict.get("paths", ()))
        lines.append(f"  merge into {conflict.get('into')} conflicted: {paths}")
    return lines


def _word(name: str) -> str:
    """A name as one word of a line: quoted when it has spaces (`'Office Default'`)."""
    return shlex.quote(name) if any(c.isspace() for c in name) else name


def workflow_lines(workflow: Workflow, *, with_steps: bool) -> list[str]:
    hidden = " [hidden]" if workflow.hidden else ""
    lines = [f"{workflow.id}  {workflow.name}  ({len(workflow.steps)} steps){hidden}"]
    if with_steps:
        for step in sorted(workflow.steps, key=lambda s: s.position):
            start = " [start]" if step.is_start_step else ""
            lines.append(f"  {step.position}. {step.name}  {step.id}  {step.stage_type}{start}")
    return lines


def profile_line(profile: AgentProfile) -> str:
    room = ""
    if profile.sandbox != "none":
        room = f"sandbox={profile.sandbox}  network={profile.network}  "
    return (
        f"{profile.id}  {profile.name}  role={profile.role}  protocol={profile.protocol}  "
        f"{room}command={shlex.join(profile.command)}"
    )


def item_line(item: Item) -> str:
    """A transcript item as one line: its first text line, and how many more it has."""
    run = f"  run={item.run_id}" if item.run_id else ""
    first, *rest = item.text.splitlines() or [""]
    more = f"  (+{len(rest)} lines)" if rest else ""
    return f"#{item.seq}  {item.at}  {item.kind}{run}  {first}{more}"


def session_line(session: Session, names: Mapping[str, str] | None = None) -> str:
    """A session as one line, naming its agent profile (`names`: profile id -> name)."""
    profile = session.agent_profile_id
    agent = (names or {}).get(profile, profile) if profile else "-"
    return f"{session.id}  task={session.task_id}  state={session.state}  profile={_word(agent)}"


def entry_lines(
    entry: StepEntry, markers: Iterable[Marker], names: Mapping[str, str] | None = None
) -> list[str]:
    """An entry and its markers, naming its step (`names`: step id -> name)."""
    state = "terminal" if entry.terminal else "open"
    step = (names or {}).get(entry.step_id, entry.step_id)
    head = (
        f"{entry.id}  task={entry.task_id}  step={_word(step)}  "
        f"#{entry.entry_seq} {entry.entry_path} {state}"
    )
    lines = [head]
    for m in markers:
        why = f" ({m.reason})" if m.reason else ""
        lines.append(f"  [{m.position}] {m.kind}: {m.state}{why}")
    return lines
