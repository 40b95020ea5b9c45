"""Read-side commands over the runs queue and the entry ledger."""

from __future__ import annotations

from collections.abc import Mapping

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.output import emit, entry_json, entry_lines, item_line, names_of, plain
from core.model import Run
from core.runs import RUN_STATUSES
from core.shapes import run_show_json


def _run_line(
    run: Run,
    names: Mapping[str, str],
    waits_for: str | None = None,
    waits_for_run: str | None = None,
) -> str:
    profile = names.get(run.agent_profile_id, run.agent_profile_id)
    step = names.get(run.workflow_step_id or "", run.workflow_step_id or "-")
    line = (
        f"{run.id}  {run.status}  reason={run.reason}  profile={profile}  "
        f"task={run.task_id or '-'}  step={step}"
    )
    if run.cancel_reason:
        line += f"  cancel={run.cancel_reason}"
    if run.retry_of:
        line += f"  retry_of={run.retry_of}"
    if waits_for:
        line += f"  (waits for a worker on {waits_for})"
    if waits_for_run:
        line += f"  (waits for its session's run {waits_for_run} to end)"
    return line


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
        waits = host.runs.waits_for_host(found)
        behind = host.runs.waits_for_run(found)
    # `waits_for_host`: the host whose workers alone may claim the queued run; `waits_for_run`:
    # the claimed run of its session it is claimed after (both additive)
    shown = [
        {**plain(r), "waits_for_host": waits.get(r.id), "waits_for_run": behind.get(r.id)}
        for r in found
    ]
    lines = [_run_line(r, names, waits.get(r.id), behind.get(r.id)) for r in found]
    emit(settings.json, shown, lines)


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
    if run.error_message:
        lines.append(f"  error: {run.error_message}")
    if run.usage:
        lines.append("  usage: " + "  ".join(f"{k}={v}" for k, v in run.usage.items()))
    lines += [f"  {item_line(i)}" for i in items]
    emit(settings.json, run_show_json(run, items), lines)


@runs.command("cancel")
@click.argument("run_ref", metavar="R")
@pass_settings
def runs_cancel(settings: Settings, run_ref: str) -> None:
    """Stop a queued or running run: it ends cancelled, with no on_agent_error.

    A queued run is cancelled at once. A running one is marked; its worker, in whatever
    process, stops the turn within a second or so (an ACP agent gets session/cancel and its
    process group is killed 10 s later if it goes on; an exec agent's group is killed). What
    the agent said so far stays in the transcript; the session waits for input.
    """
    with writer(settings) as host:
        run = host.runs.cancel(run_ref)
        names = names_of(host, [run.workflow_step_id], [run.agent_profile_id])
    emit(settings.json, run, [_run_line(run, names)])


@runs.command("retry")
@click.argument("run_ref", metavar="R")
@pass_settings
def runs_retry(settings: Settings, run_ref: str) -> None:
    """Queue a failed, dead or cancelled run again, as a new attempt.

    The new attempt is a new run (its `retry_of` names the old one, which keeps its status,
    error and transcript); the new run is printed.
    """
    with writer(settings) as host:
        run = host.runs.retry(run_ref)
        names = names_of(host, [run.workflow_step_id], [run.agent_profile_id])
    emit(settings.json, run, [_run_line(run, names)])


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
        names = names_of(host, {e.step_id for e, _markers in found}, ())
    emit(
        settings.json,
        [entry_json(e, markers) for e, markers in found],
        [line for e, markers in found for line in entry_lines(e, markers, names)],
    )


COMMANDS: tuple[click.Command, ...] = (runs, entries)
