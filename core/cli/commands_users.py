"""`laneway user`: people of the board, their roles and tokens (issue 44; CLI.md phase 4)."""

from __future__ import annotations

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.output import emit
from core.services import users


@click.group()
def user() -> None:
    """People of the board: their roles and tokens (for `serve`)."""


@user.command("add")
@click.argument("name", metavar="NAME")
@click.option("--role", required=True, help="viewer, operator or admin.")
@pass_settings
def user_add(settings: Settings, name: str, role: str) -> None:
    """Add a person; prints their token once (only its hash is stored)."""
    users.check_name(name)
    users.check_role(role)
    with writer(settings) as host:
        made, token = users.add(host.store, name, role)
    emit(
        settings.json,
        {"name": made.name, "role": made.role, "token": token},
        [f"{made.name}  {made.role}", f"token: {token}", "(shown once; keep it secret)"],
    )


@user.command("list")
@pass_settings
def user_list(settings: Settings) -> None:
    """The people and their roles (never a token)."""
    with reader(settings) as host:
        found = users.list_users(host.store)
    emit(
        settings.json,
        [u.as_json() for u in found],
        [f"{u.name}  {u.role}  {u.created_at}" for u in found] or ["no users"],
    )


@user.command("set")
@click.argument("name", metavar="NAME")
@click.option("--role", required=True, help="viewer, operator or admin.")
@pass_settings
def user_set(settings: Settings, name: str, role: str) -> None:
    """Change a person's role (their next request has it)."""
    users.check_role(role)
    with writer(settings) as host:
        changed = users.set_role(host.store, name, role)
    emit(settings.json, changed.as_json(), [f"{changed.name}  {changed.role}"])


@user.command("remove")
@click.argument("name", metavar="NAME")
@pass_settings
def user_remove(settings: Settings, name: str) -> None:
    """Remove a person; their token stops working at once, for every `serve`."""
    with writer(settings) as host:
        removed = users.remove(host.store, name)
    emit(settings.json, {"removed": removed}, [f"removed {removed}"])


@user.command("token")
@click.argument("name", metavar="NAME")
@pass_settings
def user_token(settings: Settings, name: str) -> None:
    """A new token for a person; the old one stops working at once."""
    with writer(settings) as host:
        token = users.reissue(host.store, name)
    emit(
        settings.json,
        {"name": name, "token": token},
        [f"token: {token}", "(shown once; the old one no longer works)"],
    )


COMMANDS: tuple[click.Command, ...] = (user,)
