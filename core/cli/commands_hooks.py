"""`laneway hook`: outbound webhooks (issue 42 item 1; CLI.md phase 4)."""

from __future__ import annotations

import os

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.output import emit
from core.errors import LanewayError
from core.services import hooks


@click.group()
def hook() -> None:
    """Outbound webhooks: board events POSTed to a URL, signed, retried, never lost."""


@hook.command("add")
@click.argument("url", metavar="URL")
@click.option("--events", "event_spec", metavar="T,...", help="Only these event types.")
@click.option(
    "--secret-env",
    metavar="VAR",
    help="Sign each body with the secret in this environment variable (stored, never shown).",
)
@pass_settings
def hook_add(settings: Settings, url: str, event_spec: str | None, secret_env: str | None) -> None:
    """POST every board event (of these types) to URL from now on."""
    hooks.check_url(url)
    types = hooks.parse_events(event_spec)
    secret: str | None = None
    if secret_env is not None:
        secret = os.environ.get(secret_env)
        if not secret:
            raise LanewayError(f"--secret-env: environment variable {secret_env} is not set")
    with writer(settings) as host:
        made = hooks.add(host.store, url, types, secret)
    emit(settings.json, made.as_json(), [f"{made.id}  {made.url}  {_types(made.events)}"])


def _types(types: tuple[str, ...]) -> str:
    return ",".join(types) if types else "all events"


@hook.command("list")
@pass_settings
def hook_list(settings: Settings) -> None:
    """The hooks (never their secrets)."""
    with reader(settings) as host:
        found = hooks.list_hooks(host.store)
    emit(
        settings.json,
        [h.as_json() for h in found],
        [f"{h.id}  {h.url}  {_types(h.events)}" for h in found] or ["no hooks"],
    )


@hook.command("remove")
@click.argument("hook_id", metavar="ID")
@pass_settings
def hook_remove(settings: Settings, hook_id: str) -> None:
    """Remove a hook and its deliveries."""
    with writer(settings) as host:
        gone = hooks.remove(host.store, hook_id)
    emit(settings.json, gone.as_json(), [f"removed hook {gone.id}"])


@hook.command("deliveries")
@click.option("--hook", "hook_id", metavar="H", help="Only this hook's deliveries.")
@click.option("--state", type=click.Choice(hooks.STATES), help="Only deliveries in this state.")
@pass_settings
def hook_deliveries(settings: Settings, hook_id: str | None, state: str | None) -> None:
    """The deliveries and their attempts, in event order."""
    with reader(settings) as host:
        found = hooks.deliveries(host.store, hook_id=hook_id, state=state)
    emit(
        settings.json,
        [d.as_json() for d in found],
        [
            f"{d.id}  hook={d.hook_id}  event={d.event_id}  {d.type}  {d.state}  "
            f"attempts={d.attempts}  status={d.last_status if d.last_status is not None else '-'}"
            + (f"  error={d.last_error}" if d.last_error else "")
            for d in found
        ]
        or ["no deliveries"],
    )


COMMANDS: tuple[click.Command, ...] = (hook,)
