"""Commands about the database and the host itself: init, workspace, plugins, recover."""

from __future__ import annotations

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.output import emit
from core.model import Workspace
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
    """List plugins: name, version, kinds, guards, enabled, error."""
    with reader(settings) as host:
        found = host.plugins.list()
    lines = []
    for p in found:
        state = "enabled" if p["enabled"] else "disabled"
        error = f"  error: {p['error']}" if p["error"] else ""
        kinds = ", ".join(p["kinds"]) or "-"
        guards = ", ".join(p["guards"]) or "-"
        version = p["version"] or "-"
        lines.append(f"{p['name']} {version} {state}  kinds: {kinds}  guards: {guards}{error}")
    emit(settings.json, found, lines)


@click.command()
@pass_settings
def recover(settings: Settings) -> None:
    """Open the host (which runs the recovery scan), put runs claimed by dead workers back in
    the queue, and report what was done."""
    from core import worker

    with writer(settings) as host:
        report = host.recovery_report.as_dict()
        runs = worker.requeue_orphans(host)
    report["runs_requeued"] = len(runs.requeued)
    report["runs_dead"] = len(runs.dead)
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
                f"{report['runs_requeued']}, dead {report['runs_dead']}"
            )
        ],
    )


COMMANDS: tuple[click.Command, ...] = (init, workspace, plugins, recover)
