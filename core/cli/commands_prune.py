"""`laneway prune`: keep the board's records bounded (issue 22 item 1: transcripts by age)."""

from __future__ import annotations

import click

from core.cli.app import Settings, pass_settings, writer
from core.cli.output import emit


@click.command("prune")
@click.option(
    "--transcripts-older-than",
    "older_than",
    required=True,
    metavar="DURATION",
    help="Delete transcript items older than this (30d, 12h, 90m, 1d12h, ...).",
)
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@pass_settings
def prune(settings: Settings, older_than: str, dry_run: bool) -> None:
    """Delete old transcript items, and nothing else.

    Sessions, runs, tasks and events stay; so does each session's newest item, whatever its
    age, so its numbering never goes back (a reader following with --after misses nothing).
    """
    from core.services.retention import parse_duration, prune_transcripts

    age = parse_duration(older_than, what="--transcripts-older-than")
    with writer(settings) as host:
        pruned = prune_transcripts(host.store, age, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    count = pruned.matched if dry_run else pruned.deleted
    line = (
        f"{verb} {count} transcript item{'' if count == 1 else 's'} stamped before "
        f"{pruned.cutoff} (each session's newest is kept)"
    )
    emit(settings.json, pruned.as_json(dry_run=dry_run), [line])


COMMANDS: tuple[click.Command, ...] = (prune,)
