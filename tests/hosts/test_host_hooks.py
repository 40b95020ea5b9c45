"""The host-level hooks: `laneway_host_started(host)` is called once per `Host.open`, after
recovery and with the bundle published (and not again when the bundle is rebuilt), and
`laneway_cli_commands(group)` adds a command to the `laneway` command line."""

from __future__ import annotations

import json

import attrs
import click
import pytest
from click.testing import CliRunner

from core import Features, Host, LanewayError
from core.cli import build_cli
from core.plugin.loading import PluginError
from core.plugin.selection import PluginSelection
from plugins import hookimpl


@attrs.define
class StartWatcher:
    """Records, for every call of laneway_host_started, what the host looked like."""

    seen: list[dict[str, object]] = attrs.field(factory=list)

    @hookimpl
    def laneway_host_started(self, host: Host) -> None:
        self.seen.append(
            {
                "host": host,
                "epoch": host.epoch,
                "recovered": host.recovery_report is not None,
                "generation": host.bundle.generation,
                "kinds": "clear_decisions" in host.bundle.registry.kinds,
            }
        )


class FailingStart:
    @hookimpl
    def laneway_host_started(self, host: Host) -> None:
        raise RuntimeError("refusing to start")


def _selection(name: str, plugin: object) -> PluginSelection:
    return PluginSelection(allow=frozenset({"kanban", "office", name}), extra=((name, plugin),))


def test_host_started_is_called_once_per_open_after_recovery(db_url: str) -> None:
    watcher = StartWatcher()
    with Host.open(db_url, plugins=_selection("watcher", watcher)) as first:
        assert len(watcher.seen) == 1
        call = watcher.seen[0]
        assert call["host"] is first
        assert call["epoch"] == first.epoch
        assert call["recovered"] is True
        assert call["generation"] == 0
        assert call["kinds"] is True
        first.set_features(office=False)
        first.set_plugins(allow=["kanban", "office", "watcher"])
        assert len(watcher.seen) == 1, "rebuilding the bundle is not a start"

    with Host.open(db_url, plugins=_selection("watcher", watcher)) as second:
        assert [c["host"] for c in watcher.seen] == [first, second]
        assert watcher.seen[1]["epoch"] == second.epoch != first.epoch

    with Host.open(db_url, plugins=_selection("watcher", watcher), read_only=True) as reader:
        assert watcher.seen[-1]["host"] is reader
        assert watcher.seen[-1]["epoch"] is None  # a reader mints no epoch and runs no scan
        assert watcher.seen[-1]["recovered"] is False
    assert len(watcher.seen) == 3


def test_a_failing_host_started_fails_a_strict_open_and_releases_the_database(
    db_url: str,
) -> None:
    """Strict mode (issue 12 item 4): the failure is fatal, named; lenient opens skip it
    (tests/plugins/test_plugin_isolation.py)."""
    strict = attrs.evolve(_selection("failing", FailingStart()), strict=True)
    with pytest.raises(PluginError, match="plugin 'failing' failed to start with the host: "):
        Host.open(db_url, plugins=strict)
    # the lock went with the failed open: the database opens again at once
    with Host.open(db_url, plugins=PluginSelection(allow=frozenset({"kanban"}))) as host:
        assert host.writable


@attrs.define
class BoardCommands:
    """Adds `laneway board-size`, which opens the database the global options name."""

    calls: int = 0

    @hookimpl
    def laneway_cli_commands(self, group: click.Group) -> None:
        self.calls += 1

        @click.command("board-size")
        @click.pass_obj
        def board_size(settings: object) -> None:
            """How many tasks the board holds."""
            db = getattr(settings, "db", None)
            assert isinstance(db, str)
            with Host.open(
                db,
                features=Features(),
                plugins=PluginSelection(allow=frozenset()),
                read_only=True,
            ) as host:
                click.echo(json.dumps({"tasks": len(host.tasks.list())}))

        group.add_command(board_size)


def test_cli_commands_adds_a_command_that_runs(db_url: str) -> None:
    plugin = BoardCommands()
    with Host.open(db_url, plugins=PluginSelection(allow=frozenset({"kanban"}))) as host:
        wf = host.workflows.create_from_template("simple")
        for title in ("a", "b"):
            host.tasks.create(workflow=wf.id, title=title)

    cli = build_cli(selection=PluginSelection(extra=(("board", plugin),), entry_points=False))
    assert plugin.calls == 1
    assert "board-size" in cli.commands

    runner = CliRunner()
    listed = runner.invoke(cli, ["--help"], catch_exceptions=False)
    assert "board-size" in listed.stdout
    result = runner.invoke(cli, ["--db", db_url, "board-size"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"tasks": 2}


def test_cli_commands_is_not_asked_of_a_plugin_outside_the_selection() -> None:
    plugin = BoardCommands()
    cli = build_cli(
        selection=PluginSelection(allow=frozenset(), extra=(("board", plugin),), entry_points=False)
    )
    assert plugin.calls == 0
    assert "board-size" not in cli.commands


def test_a_reader_without_started_plugins_loads_them_when_first_asked(db_url: str) -> None:
    """AC issue-14/1: `start_plugins=False` (the command line's read commands) reads the board
    without loading a plugin or calling `laneway_host_started`; the bundle, with the selected
    plugins, is built the first time it is asked for."""
    with Host.open(db_url, plugins=PluginSelection(allow=frozenset({"kanban"}))) as host:
        wf = host.workflows.create_from_template("simple")
        host.tasks.create(workflow=wf.id, title="read me")

    watcher = StartWatcher()
    with Host.open(
        db_url, plugins=_selection("watcher", watcher), read_only=True, start_plugins=False
    ) as reader:
        assert reader.current_bundle() is None
        assert [t.title for t in reader.tasks.list()] == ["read me"]
        assert reader.current_bundle() is None, "reading tasks loads no plugin"
        assert "clear_decisions" in reader.bundle.registry.kinds  # office, loaded on demand
        assert reader.bundle.registry.hooks is not None
        assert reader.current_bundle() is reader.bundle
    assert watcher.seen == [], "no start is announced for a host that started no plugins"


def test_a_writer_always_starts_its_plugins(db_url: str) -> None:
    with pytest.raises(LanewayError, match="start_plugins=False is for a read-only host"):
        Host.open(db_url, start_plugins=False)
