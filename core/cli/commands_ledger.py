"""Read-side commands over the runs queue and the entry ledger."""

from __future__ import annotations

from collections.abc import Mapping

import click

from core.cli.app import Settings, pass_settings, reader
from core.cli.output import emit, entry_json, entry_lines, item_line, names_of
from core.model import Run
from core.runs import RUN_STATUSES
from core.shapes import run_show_json


def _run_line(run: Run, names: Mapping[str, str]) -> str:
    profile = names.get(run.agent_profile_id, run.agent_profile_id)
    step = names.get(run.workflow_step_id or "", run.workflow_step_id or "-")
    return (
        f"{run.id}  {run.status}  reason={run.reason}  profile={profile}  "
        f"task={run.task_id or '-'}  step={step}"
    )


@click.group()
def runs() -> None:
    """The runs queue."""


@runs.command("list")
@click.option("--task", "task_ref", metavar="T")
@click.option(
    "--status",
    type=click.Choice(RUN_STATUSES, case_sensitive=False),
    help="Only runs in this state.",
)
@pass_settings
def runs_list(settings: Settings, task_ref: str | None, status: str | None) -> None:
    """List runs, oldest first."""
    with reader(settings) as host:
        found = host.runs.list(task=task_ref, status=status.lower() if status else None)
        names = names_of(
            host, [r.workflow_step_id for r in found], [r.agent_profile_id for r in found]
        )
    emit(settings.json, found, [_run_line(r, names) for r in found])


@runs.command("show")
@click.argument("run_ref", metavar="R")
@pass_settings
def runs_show(settings: Settings, run_ref: str) -> None:
    """A run and its transcript (by id or a unique suffix of at least 6 characters)."""
    with reader(settings) as host:
        run = host.runs.find(run_ref)
        items = host.sessions.run_items(run.id)
        names = names_of(host, [run.workflow_step_id], [run.agent_profile_id])
    lines = [_run_line(run, names)]
    if run.usage:
        lines.append("  usage: " + "  ".join(f"{k}={v}" for k, v in run.usage.items()))
    lines += [f"  {item_line(i)}" for i in items]
    emit(settings.json, run_show_json(run, items), lines)


@click.group()
def entries() -> None:
    """The entry ledger."""


@entries.command("list")
@click.option("--task", "task_ref", metavar="T")
@click.option("--non-terminal", is_flag=True, help="Only entries still open.")
@pass_settings
def entries_list(settings: Settings, task_ref: str | None, non_terminal: bool) -> None:
    """List step entries with their markers."""
    with reader(settings) as host:
        found = host.entries.list(task=task_ref, non_terminal=non_terminal)
    emit(
        settings.json,
        [entry_json(e, markers) for e, markers in found],
        [line for e, markers in found for line in entry_lines(e, markers)],
    )


COMMANDS: tuple[click.Command, ...] = (runs, entries)
