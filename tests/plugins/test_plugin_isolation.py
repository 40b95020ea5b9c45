"""Per-plugin isolation (issue 12 item 4): every hook implementation runs in its own guard.

A plugin that raises in a hook is named in the error and in a structured ERROR record
(``plugin``, ``hook``, ``error``, ``skipped``), and the other plugins keep working; strict
mode (`PluginSelection(strict=True)` / ``LANEWAY_PLUGINS_STRICT=1``) makes a failure while
starting fatal, naming the plugin. The raising plugins are found through real entry points
(a distribution's metadata on ``sys.path``), with a real pluggy manager.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from core import Host
from core.errors import LanewayError
from core.model import AgentFailure
from core.plugin.calls import Hooks
from core.plugin.loading import PluginError, load_plugins
from core.plugin.registry import RegistryError
from core.plugin.selection import PluginSelection
from plugins import ActionKind, GuardKind, GuardResult, hookimpl

BUILTIN = frozenset({"kanban", "office"})


def _install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin: str, module: str, source: str
) -> None:
    """A distribution `<plugin>_dist` whose entry point `plugin` is `module` (on sys.path)."""
    root = tmp_path / "site"
    info = root / f"{plugin}_dist-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {plugin}_dist\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[laneway.plugins]\n{plugin} = {module}\n", encoding="utf-8"
    )
    (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    monkeypatch.syspath_prepend(str(root))


def _errors_of(logs: list[dict[str, Any]], plugin: str) -> list[dict[str, Any]]:
    return [r for r in logs if r["extra"].get("plugin") == plugin and r["level"] == "ERROR"]


class Recorder:
    """A well-behaved plugin given directly: records the observer calls it receives."""

    def __init__(self) -> None:
        self.started: list[object] = []
        self.failures: list[AgentFailure] = []

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("good_kind", "durable"))

    @hookimpl
    def laneway_host_started(self, host: object) -> None:
        self.started.append(host)

    @hookimpl
    def laneway_agent_failed(self, host: object, failure: AgentFailure) -> None:
        self.failures.append(failure)

    @hookimpl
    def laneway_task_ownership(self, task: object, workspace: object) -> str | None:
        return "good"

    @hookimpl
    def laneway_cli_commands(self, group: click.Group) -> None:
        group.add_command(click.Command("good-command"))


RAISING_KINDS = """
    from plugins import ActionKind, hookimpl

    @hookimpl
    def laneway_register_action_kinds(register):
        register(ActionKind("half_declared", "durable"))
        raise ValueError("kinds are broken")
"""


def test_ac_i4_a_plugin_raising_while_registering_kinds_is_named_and_skipped(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    laneway_logs: list[dict[str, Any]],
) -> None:
    """Issue 12 item 4: `plugin 'x' failed to register its kinds: ...`; the others load."""
    _install(tmp_path, monkeypatch, "badkinds", "badkinds_mod", RAISING_KINDS)
    good = Recorder()
    selection = PluginSelection(allow=BUILTIN | {"badkinds", "good"}, extra=(("good", good),))

    with Host.open(sqlite_url, plugins=selection) as host:
        registry = host.registry
        info = next(i for i in registry.plugins if i.name == "badkinds")
        assert "good_kind" in registry.kinds
        assert "wait_for_quorum" in registry.guards  # office loaded
        assert "auto_start_agent" in registry.kinds  # kanban loaded
        assert "half_declared" not in registry.kinds  # what it declared before raising is gone
        assert good.started == [host]

    assert info.enabled is False
    assert info.error == (
        "plugin 'badkinds' failed to register its kinds: ValueError: kinds are broken"
    )
    [record] = _errors_of(laneway_logs, "badkinds")
    assert record["extra"]["hook"] == "laneway_register_action_kinds"
    assert record["extra"]["error"] == "ValueError: kinds are broken"
    assert record["extra"]["skipped"] is True


def test_ac_i4_strict_mode_refuses_a_plugin_raising_while_registering_kinds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> None:
    _install(tmp_path, monkeypatch, "badkinds2", "badkinds2_mod", RAISING_KINDS)
    monkeypatch.setenv("LANEWAY_PLUGINS_STRICT", "1")
    selection = PluginSelection.from_env(allow=BUILTIN | {"badkinds2"})
    assert selection.strict

    with pytest.raises(PluginError) as raised:
        Host.open(sqlite_url, plugins=selection)

    assert str(raised.value) == (
        "plugin 'badkinds2' failed to register its kinds: ValueError: kinds are broken"
    )
    assert isinstance(raised.value, LanewayError)
    # the failed open released the database
    with Host.open(sqlite_url, plugins=PluginSelection(allow=BUILTIN)) as host:
        assert host.writable


def test_ac_i4_a_plugin_raising_while_registering_guards_loses_its_kinds_and_hooks_too(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    laneway_logs: list[dict[str, Any]],
) -> None:
    _install(
        tmp_path,
        monkeypatch,
        "badguards",
        "badguards_mod",
        """
        from plugins import ActionKind, hookimpl

        STARTED = []

        @hookimpl
        def laneway_register_action_kinds(register):
            register(ActionKind("badguards_kind", "durable"))

        @hookimpl
        def laneway_register_guards(register):
            raise KeyError("guard table")

        @hookimpl
        def laneway_host_started(host):
            STARTED.append(host)
        """,
    )
    good = Recorder()
    selection = PluginSelection(allow=BUILTIN | {"badguards", "good"}, extra=(("good", good),))

    with Host.open(sqlite_url, plugins=selection) as host:
        assert "badguards_kind" not in host.registry.kinds
        assert "good_kind" in host.registry.kinds
        assert "wait_for_quorum" in host.registry.guards
        assert good.started == [host]
        import badguards_mod  # type: ignore[import-not-found]

        assert badguards_mod.STARTED == []  # a skipped plugin's other hooks never run

    [record] = _errors_of(laneway_logs, "badguards")
    assert record["extra"]["hook"] == "laneway_register_guards"
    assert record["extra"]["error"] == "KeyError: 'guard table'"


def test_ac_i4_registering_a_non_declaration_skips_that_plugin_only() -> None:
    class Wrong:
        @hookimpl
        def laneway_register_guards(self, register: Callable[[GuardKind], None]) -> None:
            register("wait_for_me")  # type: ignore[arg-type]

    from core import structural
    from core.plugin.kinds import Features
    from core.plugin.registry import build_registry

    loaded = load_plugins(
        PluginSelection(allow=BUILTIN | {"wrong"}, extra=(("wrong", Wrong()),)),
        [("core", structural)],
    )
    registry = build_registry(loaded, Features())

    info = next(i for i in registry.plugins if i.name == "wrong")
    assert info.error == (
        "plugin 'wrong' failed to register its guards: "
        "TypeError: registered 'wait_for_me', not a GuardKind"
    )
    assert "wait_for_quorum" in registry.guards


def test_ac_i4_a_conflict_between_two_plugins_still_stops_the_host_as_a_laneway_error() -> None:
    """Two declarers of one name: neither is the one to skip, so the registry refuses."""

    class Twin:
        @hookimpl
        def laneway_register_guards(self, register: Callable[[GuardKind], None]) -> None:
            register(GuardKind("wait_for_quorum", dict, lambda ctx, cfg: GuardResult(True)))

    from core import structural
    from core.plugin.kinds import Features
    from core.plugin.registry import build_registry

    loaded = load_plugins(
        PluginSelection(allow=BUILTIN | {"twin"}, extra=(("twin", Twin()),)), [("core", structural)]
    )
    with pytest.raises(RegistryError, match="'office' and 'twin'") as raised:
        build_registry(loaded, Features())
    assert isinstance(raised.value, LanewayError)


def test_ac_i4_a_plugin_raising_in_host_started_is_reported_and_the_others_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    laneway_logs: list[dict[str, Any]],
) -> None:
    source = """
        from plugins import hookimpl

        @hookimpl
        def laneway_host_started(host):
            raise RuntimeError("cannot start")
    """
    _install(tmp_path, monkeypatch, "badstart", "badstart_mod", source)
    good = Recorder()
    selection = PluginSelection(allow=BUILTIN | {"badstart", "good"}, extra=(("good", good),))

    with Host.open(sqlite_url, plugins=selection) as host:
        assert good.started == [host]

    [record] = _errors_of(laneway_logs, "badstart")
    assert record["extra"]["hook"] == "laneway_host_started"
    assert record["extra"]["error"] == "RuntimeError: cannot start"

    strict = PluginSelection(allow=BUILTIN | {"badstart"}, strict=True)
    with pytest.raises(PluginError, match=r"^plugin 'badstart' failed to start with the host: "):
        Host.open(sqlite_url, plugins=strict)


def test_ac_i4_one_raising_agent_failed_observer_never_stops_the_others(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    laneway_logs: list[dict[str, Any]],
) -> None:
    source = """
        from plugins import hookimpl

        @hookimpl
        def laneway_agent_failed(host, failure):
            raise RuntimeError("observer down")
    """
    _install(tmp_path, monkeypatch, "badobserver", "badobserver_mod", source)
    good = Recorder()
    # strict too: an observer can never stop the host
    selection = PluginSelection(
        allow=BUILTIN | {"badobserver", "good"}, extra=(("good", good),), strict=True
    )
    failure = AgentFailure(task_id="t1", session_id="s1", route="R1", error_message="boom")

    with Host.open(sqlite_url, plugins=selection) as host:
        host.bundle.registry.hooks.agent_failed(host, failure)

    assert good.failures == [failure]
    [record] = _errors_of(laneway_logs, "badobserver")
    assert record["extra"]["hook"] == "laneway_agent_failed"
    assert record["extra"]["skipped"] is False


def test_ac_i4_a_raising_ownership_answer_counts_as_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, laneway_logs: list[dict[str, Any]]
) -> None:
    source = """
        from plugins import hookimpl

        @hookimpl(tryfirst=True)
        def laneway_task_ownership(task, workspace):
            raise RuntimeError("who knows")
    """
    _install(tmp_path, monkeypatch, "badowner", "badowner_mod", source)
    loaded = load_plugins(
        PluginSelection(allow={"badowner", "good"}, extra=(("good", Recorder()),))
    )

    owner = Hooks(loaded.manager).task_ownership(task=object(), workspace=object())  # type: ignore[arg-type]

    assert owner == "good"
    [record] = _errors_of(laneway_logs, "badowner")
    assert record["extra"]["hook"] == "laneway_task_ownership"


def test_ac_i4_a_plugin_raising_in_cli_commands_loses_its_commands_and_the_others_keep_theirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, laneway_logs: list[dict[str, Any]]
) -> None:
    source = """
        import click
        from plugins import hookimpl

        @hookimpl
        def laneway_cli_commands(group):
            group.add_command(click.Command("half-added"))
            raise RuntimeError("no commands today")
    """
    _install(tmp_path, monkeypatch, "badcli", "badcli_mod", source)
    selection = PluginSelection(allow={"badcli", "good"}, extra=(("good", Recorder()),))
    group = click.Group("laneway")

    failures = Hooks(load_plugins(selection).manager).cli_commands(group)

    assert set(group.commands) == {"good-command"}
    assert failures == [
        "plugin 'badcli' failed to add its commands: RuntimeError: no commands today"
    ]
    [record] = _errors_of(laneway_logs, "badcli")
    assert record["extra"]["hook"] == "laneway_cli_commands"

    strict = load_plugins(attrs_evolve_strict(selection))
    with pytest.raises(PluginError, match="plugin 'badcli' failed to add its commands"):
        Hooks(strict.manager, strict=strict.strict).cli_commands(click.Group("laneway"))


def attrs_evolve_strict(selection: PluginSelection) -> PluginSelection:
    import attrs

    return attrs.evolve(selection, strict=True)


def test_ac_i4_plugin_and_registry_errors_are_laneway_errors() -> None:
    """The CLI and the HTTP API print LanewayError's message as one line: no special list."""
    assert issubclass(PluginError, LanewayError)
    assert issubclass(RegistryError, LanewayError)


def test_ac_i4_strict_mode_from_the_environment_makes_the_command_line_refuse_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> None:
    """``LANEWAY_PLUGINS_STRICT=1``: a command opening the host exits 1 with the plugin named
    in one line, no traceback; without it the same command works."""
    from click.testing import CliRunner

    from core.cli.app import build_cli

    _install(tmp_path, monkeypatch, "badkinds3", "badkinds3_mod", RAISING_KINDS)
    monkeypatch.setenv("LANEWAY_PLUGINS_ALLOW", "kanban,office,badkinds3")
    cli = build_cli(plugin_commands=False)

    lenient = CliRunner().invoke(cli, ["--db", sqlite_url, "init"], catch_exceptions=False)
    assert lenient.exit_code == 0, lenient.output

    monkeypatch.setenv("LANEWAY_PLUGINS_STRICT", "1")
    strict = CliRunner().invoke(cli, ["--db", sqlite_url, "task", "list"])
    assert strict.exit_code == 1
    assert "Traceback" not in strict.output
    assert "plugin 'badkinds3' failed to register its kinds: ValueError: kinds are broken" in (
        strict.stderr
    )
