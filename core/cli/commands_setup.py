"""Commands about the database and the host itself: init, workspace, plugins, recover,
features."""

from __future__ import annotations

import re

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.output import emit
from core.errors import LanewayError
from core.model import Workspace
from core.plugin.features import Features
from core.plugin.selection import PluginSelection
from core.store import migrate


@click.command()
@pass_settings
def init(settings: Settings) -> None:
    """Create or upgrade the schema (idempotent)."""
    with writer(settings, init=True) as host:
        with host.store.read() as conn:
            revision = migrate.current_revision(conn)
        database = host.store.display_url
    emit(
        settings.json,
        {"database": database, "revision": revision},
        [f"database {database} at revision {revision}"],
    )


def _workspace_lines(workspace: Workspace) -> list[str]:
    office = workspace.office_workflow_id or "-"
    return [f"{workspace.id}  {workspace.name}  office_workflow={office}"]


@click.group()
def workspace() -> None:
    """The default workspace."""


@workspace.command("show")
@pass_settings
def workspace_show(settings: Settings) -> None:
    """Show the default workspace."""
    with reader(settings) as host:
        found = host.workspace.get()
    emit(settings.json, found, _workspace_lines(found))


@workspace.command("set")
@click.option("--office-workflow", metavar="W", help="The workflow whose tasks Office owns.")
@click.option("--name", metavar="N", help="A new name for the workspace.")
@pass_settings
def workspace_set(settings: Settings, office_workflow: str | None, name: str | None) -> None:
    """Change the default workspace."""
    with writer(settings) as host:
        found = host.workspace.set(office_workflow=office_workflow, name=name)
    emit(settings.json, found, _workspace_lines(found))


@click.group()
def plugins() -> None:
    """Plugins and what they declare."""


@plugins.command("list")
@pass_settings
def plugins_list(settings: Settings) -> None:
    """List plugins: name, version, kinds, guards, enabled, error.

    It needs no database: it lists what is installed, as a host would load it, with the
    board's feature switches when the database exists (`--no-office` overrides them)."""
    from core.services.plugins import installed

    features = settings.features or _board_features(settings.db) or Features()
    found = installed(PluginSelection.from_env(), features)
    lines = []
    for p in found:
        state = "enabled" if p["enabled"] else "disabled"
        error = f"  error: {p['error']}" if p["error"] else ""
        kinds = ", ".join(p["kinds"]) or "-"
        guards = ", ".join(p["guards"]) or "-"
        version = p["version"] or "-"
        lines.append(f"{p['name']} {version} {state}  kinds: {kinds}  guards: {guards}{error}")
    emit(settings.json, found, lines)


def _board_features(url: str) -> Features | None:
    """The board's switches, read without opening a host; None when there is no usable board
    (no database yet, or one this command cannot read: plugins list works without one)."""
    from core import board
    from core.store.database import Store
    from core.store.dialect import normalise_url, sqlite_path

    path = sqlite_path(normalise_url(url)) if url.startswith("sqlite") else None
    if url.startswith("sqlite") and (path is None or not path.exists()):
        return None
    try:
        store = Store(url)
        try:
            with store.engine.connect() as conn:
                return board.read(conn).features
        finally:
            store.close()
    except Exception:  # noqa: BLE001 - the listing never depends on the database
        return None


@click.command()
@pass_settings
def recover(settings: Settings) -> None:
    """Open the host (which runs the recovery scan), put runs claimed by dead workers back in
    the queue, and report what was done."""
    from core.agents import worker
    from core.services import unattended

    if settings.features is not None:
        raise LanewayError(
            "recover: a process with a per-process feature override (--no-office) does not "
            "run the recovery scan; drop --no-office (the board's switch is `features set`)"
        )
    with writer(settings) as host:
        report = host.recovery_report.as_dict()
        runs = worker.requeue_orphans(host)
        # triggers whose cause committed before a crash and were never delivered (core.outbox)
        delivered = host.triggers.drain()
        # hosts that queued runs wait for with no worker alive there (said once)
        unattended_hosts = unattended.notice(host)
    report["hosts_unattended"] = unattended_hosts
    report["runs_requeued"] = len(runs.requeued)
    report["runs_dead"] = len(runs.dead)
    report["triggers_delivered"] = delivered.delivered
    skipped = report["skipped"]
    assert isinstance(skipped, dict)
    skipped_text = ", ".join(f"{k}={v}" for k, v in skipped.items()) or "none"
    emit(
        settings.json,
        report,
        [
            (
                f"scanned {report['scanned']}, redispatched {report['redispatched']}, "
                f"errors {report['errors']}, skipped: {skipped_text}; runs re-queued "
                f"{report['runs_requeued']}, dead {report['runs_dead']}; triggers delivered "
                f"{report['triggers_delivered']}"
            ),
            *(
                f"runs wait for a worker on {name}, and no worker there is alive"
                for name in unattended_hosts
            ),
        ],
    )


def _features_lines(found: dict[str, bool]) -> list[str]:
    return [f"{name}: {'on' if on else 'off'}" for name, on in found.items()]


@click.group(invoke_without_command=True)
@click.pass_context
def features(ctx: click.Context) -> None:
    """The board's feature switches, stored in the database and followed by every process."""
    if ctx.invoked_subcommand is not None:
        return
    settings = ctx.find_object(Settings)
    assert settings is not None
    with reader(settings) as host:
        found = host.board_features().as_dict()
    emit(settings.json, found, _features_lines(found))


_SWITCH = re.compile(r"^(?P<name>[a-z_]+)=(?P<value>on|off|true|false)$")


@features.command("set")
@click.argument("switches", nargs=-1, required=True, metavar="NAME=on|off...")
@pass_settings
def features_set(settings: Settings, switches: tuple[str, ...]) -> None:
    """Switch board features on or off (`office=off`); every process follows."""
    changes: dict[str, bool] = {}
    for switch in switches:
        match = _SWITCH.match(switch.strip().lower())
        if match is None:
            raise LanewayError(f"features set: {switch!r}: expected NAME=on or NAME=off")
        changes[match["name"]] = match["value"] in ("on", "true")
    with writer(settings) as host:
        host.set_features(**changes)
        found = host.board_features().as_dict()
    emit(settings.json, found, _features_lines(found))


COMMANDS: tuple[click.Command, ...] = (init, workspace, plugins, recover, features)
