"""`laneway demo`, added to the command line by the Office plugin (`laneway_cli_commands`)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import click
from click.core import ParameterSource

if TYPE_CHECKING:
    from plugins.app import Settings


def _db_given(ctx: click.Context) -> bool:
    source = ctx.find_root().get_parameter_source("db")
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


@click.command("demo")
@click.pass_context
def demo(ctx: click.Context) -> None:
    """The Office loop end to end with scripted agents, in about two seconds (it says how long).

    A worker fails once and the CEO picks it up, a reviewer rejects the first round, both
    approve the second, the approver approves: the task reaches Done. On a fresh temporary
    SQLite database unless --db (or LANEWAY_DB) names one, which it initialises if needed
    (the demo then adds its workflow, profiles and task there, and makes its workflow the
    workspace's office workflow).
    """
    from plugins.app import Settings  # the host loads when the command runs, not at --help

    began = time.monotonic()
    settings = ctx.find_object(Settings)
    assert settings is not None
    if _db_given(ctx):
        # The database is the user's, and so are the profiles the demo leaves there; the
        # agents' counts are the demo's own and go with it. Only the demo's task needs them
        # (an agent remakes the folder when a run there comes later), so a later worker runs
        # these profiles without them.
        with tempfile.TemporaryDirectory(prefix="laneway-demo-") as scratch:
            _demo(settings, Path(scratch), began)
        return
    workdir = Path(tempfile.mkdtemp(prefix="laneway-demo-"))  # kept: it holds demo.db
    _demo(attrs.evolve(settings, db=f"sqlite:///{workdir / 'demo.db'}"), workdir / "agents", began)


def _demo(settings: Settings, state_dir: Path, began: float) -> None:
    # the demo and the board's code load when the command runs, not when `--help` lists it
    from office_plugin.demo.board import build_board
    from office_plugin.demo.output import event_line, summary_lines
    from office_plugin.demo.walk import require_done, walk
    from plugins.app import emit, plain, writer

    def show(event: dict[str, Any]) -> None:
        if settings.json:
            click.echo(json.dumps(plain(event), ensure_ascii=False), err=True)
        else:
            click.echo(event_line(event))

    with writer(settings, init=True) as host:
        database = host.store.display_url
        board = build_board(host, state_dir)
        if not settings.json:
            click.echo(f"laneway demo: {board.workflow.name} with scripted agents on {database}")
            click.echo("")
        result = require_done(walk(host, board, on_event=show))
    lines = ["", *summary_lines(result), ""]
    lines.append(f"look around: laneway --db {database} runs list --task {result.task_id}")
    # measured, never claimed: the schema, the board and the walk, on this machine
    lines.append(f"the demo took {time.monotonic() - began:.1f}s")
    emit(settings.json, result.as_json(), lines)
