"""`laneway permission`: the permission requests of ACP agents (`--permissions ask`), answered
from any process; the waiting worker's turn goes on (CLI.md `permission`)."""

from __future__ import annotations

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.output import emit
from core.model import PERMISSION_STATES, Permission


def permission_line(p: Permission) -> str:
    title = str(p.tool_call.get("title") or p.tool_call.get("kind") or "tool call")
    answer = f"  option={p.option_id}" if p.option_id else ""
    by = f"  by={p.decided_by}" if p.decided_by else ""
    return f"{p.id}  {p.state}  task={p.task_id}  run={p.run_id or '-'}  {title}{answer}{by}"


@click.group()
def permission() -> None:
    """Permission requests of ACP agents, answered by a person."""


@permission.command("list")
@click.option("--task", "task_ref", metavar="T")
@click.option(
    "--state",
    type=click.Choice(PERMISSION_STATES, case_sensitive=False),
    help="Only requests in this state.",
)
@pass_settings
def permission_list(settings: Settings, task_ref: str | None, state: str | None) -> None:
    """List permission requests, oldest first."""
    with reader(settings) as host:
        found = host.permissions.list(task=task_ref, state=state.lower() if state else None)
    emit(settings.json, found, [permission_line(p) for p in found] or ["no permission requests"])


@permission.command("allow")
@click.argument("ref", metavar="ID")
@click.option("--always", is_flag=True, help="Pick the agent's allow_always option.")
@click.option("--by", default="user", metavar="NAME", help="Who answers. Default: user.")
@pass_settings
def permission_allow(settings: Settings, ref: str, always: bool, by: str) -> None:
    """Allow a pending request; the waiting turn goes on."""
    with writer(settings) as host:
        answered = host.permissions.answer(ref, True, always=always, by=by)
    emit(settings.json, answered, [permission_line(answered)])


@permission.command("deny")
@click.argument("ref", metavar="ID")
@click.option("--by", default="user", metavar="NAME", help="Who answers. Default: user.")
@pass_settings
def permission_deny(settings: Settings, ref: str, by: str) -> None:
    """Deny a pending request; the waiting turn goes on."""
    with writer(settings) as host:
        answered = host.permissions.answer(ref, False, by=by)
    emit(settings.json, answered, [permission_line(answered)])


COMMANDS: tuple[click.Command, ...] = (permission,)
