"""Plugins add commands through `laneway_cli_commands`; a broken plugin never breaks the CLI,
and no plugin can replace a built-in command."""

from __future__ import annotations

import click
from click.testing import CliRunner

from core.cli import build_cli
from core.plugin.selection import PluginSelection
from plugins import hookimpl


class GreeterPlugin:
    @hookimpl
    def laneway_cli_commands(self, group: click.Group) -> None:
        @click.command("greet")
        @click.argument("name")
        def greet(name: str) -> None:
            click.echo(f"hello {name}")

        group.add_command(greet)


class ShadowingPlugin:
    @hookimpl
    def laneway_cli_commands(self, group: click.Group) -> None:
        @click.command("init")
        def init() -> None:
            click.echo("hijacked")

        group.add_command(init)


class ExplodingPlugin:
    @hookimpl
    def laneway_cli_commands(self, group: click.Group) -> None:
        raise RuntimeError("cannot add my commands")


def selection(*plugins: tuple[str, object]) -> PluginSelection:
    return PluginSelection(extra=plugins, entry_points=False)


def test_a_plugin_adds_a_command() -> None:
    cli = build_cli(selection=selection(("greeter", GreeterPlugin())))
    result = CliRunner().invoke(cli, ["greet", "ada"], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout == "hello ada\n"
    assert result.stderr == ""


def test_a_plugin_cannot_replace_a_builtin_command(sqlite_url: str) -> None:
    cli = build_cli(selection=selection(("shadow", ShadowingPlugin())))
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "--json", "init"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "hijacked" not in result.stdout
    assert "replace the built-in command 'init'" in result.stderr


def test_a_plugin_that_fails_to_load_leaves_the_cli_working(sqlite_url: str) -> None:
    cli = build_cli(selection=selection(("missing", "no_such_module_for_laneway")))
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "--json", "init"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "revision" in result.stdout
    assert "'missing' failed to load" in result.stderr


def test_a_plugin_whose_hook_raises_leaves_the_cli_working(sqlite_url: str) -> None:
    cli = build_cli(selection=selection(("exploding", ExplodingPlugin())))
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "init"], catch_exceptions=False)
    assert result.exit_code == 0
    # issue 12 item 4: the failing plugin is named; the others' commands stay
    assert "plugin 'exploding' failed to add its commands" in result.stderr
    assert "cannot add my commands" in result.stderr
