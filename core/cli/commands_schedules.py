"""`laneway schedule`: tasks created by themselves (issue 42 item 4; CLI.md phase 4)."""

from __future__ import annotations

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.output import emit
from core.services.schedules import Schedule


@click.group()
def schedule() -> None:
    """Tasks created by themselves, once per slot of N seconds."""


def _line(s: Schedule, workflow: str) -> str:
    return (
        f"{s.id}  every {s.every_seconds}s  {workflow}  {s.title!r}  next {s.as_json()['next_at']}"
    )


@schedule.command("add")
@click.option("--workflow", "workflow", required=True, metavar="W", help="The task's workflow.")
@click.option("--title", required=True, metavar="T", help="The title of each task.")
@click.option("--description", default="", metavar="D", help="The description of each task.")
@click.option("--step", default=None, metavar="S", help="Where each task is created.")
@click.option(
    "--every",
    "every",
    required=True,
    metavar="SECONDS",
    help="The slot's length: slots are the multiples of it since the Unix epoch (UTC).",
)
@pass_settings
def schedule_add(
    settings: Settings,
    workflow: str,
    title: str,
    description: str,
    step: str | None,
    every: str,
) -> None:
    """Create a task once per slot, from the next slot on, by whichever process runs the
    scheduler (every worker and serve), never twice for one slot."""
    with writer(settings) as host:
        made = host.schedules.add(
            workflow=workflow, title=title, description=description, step=step, every=every
        )
        name = host.workflows.by_id(made.workflow_id).name
    emit(settings.json, made.as_json(), [_line(made, name)])


@schedule.command("list")
@pass_settings
def schedule_list(settings: Settings) -> None:
    """The schedules, oldest first."""
    with reader(settings) as host:
        found = host.schedules.list()
        names = {s.workflow_id: host.workflows.by_id(s.workflow_id).name for s in found}
    emit(
        settings.json,
        [s.as_json() for s in found],
        [_line(s, names[s.workflow_id]) for s in found] or ["no schedules"],
    )


@schedule.command("remove")
@click.argument("schedule_id", metavar="ID")
@pass_settings
def schedule_remove(settings: Settings, schedule_id: str) -> None:
    """Remove a schedule: no task is created for it any more."""
    with writer(settings) as host:
        gone = host.schedules.remove(schedule_id)
    emit(settings.json, {"removed": gone.id}, [f"removed schedule {gone.id}"])


COMMANDS: tuple[click.Command, ...] = (schedule,)
