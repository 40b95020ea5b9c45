"""Plugin discovery and selection: entry points, allow- and block-lists (arguments and
environment), broken and conflicting plugins, and what a feature switch does to the registry."""

from __future__ import annotations

import importlib.metadata
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core import Features, Host, structural
from core.plugin.kinds import ActionKind, GuardKind, GuardResult
from core.plugin.loading import LoadedPlugins, PluginError, PluginInfo, load_plugins
from core.plugin.registry import Registry, RegistryError, build_registry
from core.plugin.selection import PluginSelection
from office_plugin.kinds import declarations as office_declarations
from office_plugin.quorum import GUARD as QUORUM_GUARD
from plugins import hookimpl
from tests.conftest import open_host

OFFICE_KINDS = frozenset(k.name for k in office_declarations())
KANBAN_KINDS = frozenset(
    {
        "reset_agent_context",
        "configure_session",
        "enable_plan_mode",
        "disable_plan_mode",
        "set_session_mode",
        "set_workflow_data",
        "auto_start_agent",
        "merge_branch",
        "push_branch",
        "open_pull_request",
        "sync_pull_request",
    }
)
CORE_KINDS = frozenset(k.name for k in structural.KINDS)
BUILTIN = frozenset({"kanban", "office"})


def _load(selection: PluginSelection) -> LoadedPlugins:
    return load_plugins(selection, builtins=[("core", structural)])


def _registry(selection: PluginSelection, features: Features | None = None) -> Registry:
    return build_registry(_load(selection), features or Features())


def _info(registry: Registry, name: str) -> PluginInfo:
    return next(i for i in registry.plugins if i.name == name)


# -- discovery through the installed distribution ------------------------------------------------


def test_kanban_and_office_are_entry_points_of_the_laneway_distribution() -> None:
    dist = importlib.metadata.distribution("laneway")
    declared = {ep.name: ep.value for ep in dist.entry_points.select(group="laneway.plugins")}

    assert declared == {"kanban": "kanban_plugin", "office": "office_plugin"}


def test_default_selection_loads_both_from_entry_points_with_their_distribution() -> None:
    registry = _registry(PluginSelection(allow=BUILTIN))
    version = importlib.metadata.version("laneway")

    assert _info(registry, "kanban") == PluginInfo("kanban", version, "laneway", enabled=True)
    assert _info(registry, "office") == PluginInfo("office", version, "laneway", enabled=True)
    assert set(registry.kinds_of("office")) == OFFICE_KINDS
    assert set(registry.kinds_of("kanban")) == KANBAN_KINDS
    assert set(registry.kinds_of("core")) == CORE_KINDS
    assert registry.guards_of("office") == [QUORUM_GUARD.name] == ["wait_for_quorum"]


def test_no_entry_points_means_only_core() -> None:
    registry = _registry(PluginSelection(entry_points=False))

    assert set(registry.kinds) == CORE_KINDS
    assert [i.name for i in registry.plugins] == ["core"]


# -- block- and allow-lists ------------------------------------------------------------------------


def test_blocking_office_removes_its_kinds_and_guard_and_lists_it_blocked(sqlite_url: str) -> None:
    selection = PluginSelection(allow=BUILTIN, block=frozenset({"office"}))
    with Host.open(sqlite_url, plugins=selection) as host:
        registry = host.registry
        listed = {row["name"]: row for row in host.plugins.list()}

    assert OFFICE_KINDS.isdisjoint(registry.kinds)
    assert registry.guard("wait_for_quorum") is None
    assert set(registry.kinds) >= KANBAN_KINDS
    assert _info(registry, "office").blocked
    assert listed["office"] == {
        "name": "office",
        "version": importlib.metadata.version("laneway"),
        "kinds": [],
        "guards": [],
        "enabled": False,
        "error": None,
    }
    assert listed["kanban"]["enabled"] is True


def test_allow_list_loads_only_the_named_plugins_and_core_always() -> None:
    only_kanban = _registry(PluginSelection(allow=frozenset({"kanban"})))
    nothing = _registry(PluginSelection(allow=frozenset()))

    assert set(only_kanban.kinds) == KANBAN_KINDS | CORE_KINDS
    assert _info(only_kanban, "office").blocked
    assert not _info(only_kanban, "office").enabled
    assert set(nothing.kinds) == CORE_KINDS
    # other installed plugins (the example plugin in CI) are blocked too
    assert {i.name for i in nothing.plugins if i.blocked} >= BUILTIN


def test_allow_list_applies_to_plugins_given_directly_too() -> None:
    selection = PluginSelection(
        allow=frozenset({"wanted"}),
        extra=(("wanted", _kind_plugin("wanted_kind")), ("unwanted", _kind_plugin("other_kind"))),
        entry_points=False,
    )
    registry = _registry(selection)

    assert set(registry.kinds) == CORE_KINDS | {"wanted_kind"}
    assert _info(registry, "unwanted").blocked


def test_core_cannot_be_blocked() -> None:
    registry = _registry(
        PluginSelection(
            allow=frozenset({"kanban", "office"}), block=frozenset({"core", "kanban", "office"})
        )
    )

    assert set(registry.kinds) == CORE_KINDS
    assert _info(registry, "core").enabled


def test_selection_from_env_reads_comma_separated_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANEWAY_PLUGINS_ALLOW", raising=False)
    monkeypatch.delenv("LANEWAY_PLUGINS_BLOCK", raising=False)
    assert PluginSelection.from_env() == PluginSelection()

    monkeypatch.setenv("LANEWAY_PLUGINS_BLOCK", " office, ,extra ")
    monkeypatch.setenv("LANEWAY_PLUGINS_ALLOW", "kanban,office")
    selection = PluginSelection.from_env()
    assert selection.block == {"office", "extra"}
    assert selection.allow == {"kanban", "office"}

    monkeypatch.setenv("LANEWAY_PLUGINS_ALLOW", "")
    assert PluginSelection.from_env().allow == frozenset()  # set but empty: nothing but core
    assert PluginSelection.from_env(strict=True).strict  # overrides pass through


def test_host_opened_without_a_selection_obeys_the_environment(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEWAY_PLUGINS_ALLOW", "kanban,office")
    monkeypatch.setenv("LANEWAY_PLUGINS_BLOCK", "office")
    with Host.open(sqlite_url) as host:
        assert OFFICE_KINDS.isdisjoint(host.registry.kinds)
        assert set(host.registry.kinds) >= KANBAN_KINDS
        assert _info(host.registry, "office").blocked


# -- features --------------------------------------------------------------------------------------


def test_office_feature_off_keeps_its_kinds_recognised_without_executor(sqlite_url: str) -> None:
    with open_host(sqlite_url, office=False) as host:
        registry = host.registry
        listed = {row["name"]: row for row in host.plugins.list()}

    for name in OFFICE_KINDS:
        registered = registry.kind(name)
        assert registered is not None, name
        assert registered.plugin == "office"
        assert registered.kind.owner == "durable"
        assert registered.executable is False
    quorum = registry.guard("wait_for_quorum")
    assert quorum is not None
    assert quorum.enabled is False
    assert listed["office"]["enabled"] is False
    assert listed["office"]["kinds"] == sorted(OFFICE_KINDS)
    assert listed["office"]["guards"] == ["wait_for_quorum"]
    assert not _info(registry, "office").blocked
    assert listed["kanban"]["enabled"] is True
    assert all(registry.kinds[k].executable for k in KANBAN_KINDS)


def test_office_feature_on_lists_office_enabled_with_its_guard_enabled() -> None:
    registry = _registry(PluginSelection(allow=BUILTIN), Features(office=True))
    quorum = registry.guard("wait_for_quorum")

    assert _info(registry, "office").enabled
    assert quorum is not None
    assert quorum.enabled
    for name in OFFICE_KINDS:
        kind = registry.kinds[name]
        assert kind.executable == (kind.kind.execute is not None)


# -- a plugin whose import raises, found through a real entry point ------------------------------


def _fake_distribution(
    root: Path, dist: str, version: str, entry_points: str, modules: dict[str, str]
) -> Path:
    info = root / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return root


@pytest.fixture
def broken_plugin_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _fake_distribution(
        tmp_path / "site",
        "broken_plugin",
        "0.1",
        "[laneway.plugins]\nbroken = broken_plugin_mod\n",
        {"broken_plugin_mod": 'raise RuntimeError("libfoo is missing")\n'},
    )
    monkeypatch.syspath_prepend(str(root))


@pytest.mark.usefixtures("broken_plugin_on_path")
def test_broken_plugin_is_reported_and_the_host_still_opens(
    sqlite_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    selection = PluginSelection(allow=BUILTIN | {"broken"})
    with Host.open(sqlite_url, plugins=selection) as host:
        broken = _info(host.registry, "broken")
        listed = {row["name"]: row for row in host.plugins.list()}
        assert set(host.registry.kinds) >= OFFICE_KINDS | KANBAN_KINDS

    assert broken == PluginInfo(
        "broken",
        "0.1",
        "broken_plugin",
        enabled=False,
        error="RuntimeError: libfoo is missing",
    )
    assert listed["broken"]["enabled"] is False
    assert listed["broken"]["error"] == "RuntimeError: libfoo is missing"
    warnings = [r for r in laneway_logs if r["extra"].get("plugin") == "broken"]
    assert warnings
    assert warnings[0]["level"] == "WARNING"
    assert warnings[0]["extra"]["distribution"] == "broken_plugin"
    assert "libfoo is missing" in warnings[0]["extra"]["error"]


@pytest.mark.usefixtures("broken_plugin_on_path")
def test_blocked_broken_plugin_is_never_imported() -> None:
    registry = _registry(PluginSelection(allow=BUILTIN | {"broken"}, block=frozenset({"broken"})))

    assert _info(registry, "broken") == PluginInfo(
        "broken", "0.1", "broken_plugin", enabled=False, blocked=True
    )


@pytest.mark.usefixtures("broken_plugin_on_path")
def test_strict_selection_refuses_a_broken_plugin_naming_it(sqlite_url: str) -> None:
    selection = PluginSelection(allow=BUILTIN | {"broken"}, strict=True)

    with pytest.raises(PluginError) as raised:
        Host.open(sqlite_url, plugins=selection)

    message = str(raised.value)
    assert "'broken'" in message
    assert "broken_plugin" in message
    assert "RuntimeError: libfoo is missing" in message
    # The failed open released the database: a lenient open succeeds.
    with Host.open(sqlite_url, plugins=PluginSelection(allow=BUILTIN)) as host:
        assert host.writable


def test_two_distributions_with_one_plugin_name_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _fake_distribution(
        tmp_path / "site",
        "rival_office",
        "2.0",
        "[laneway.plugins]\noffice = rival_office_mod\n",
        {"rival_office_mod": ""},
    )
    monkeypatch.syspath_prepend(str(root))

    with pytest.raises(PluginError, match="two plugins are named 'office'") as raised:
        _load(PluginSelection())

    assert "rival_office" in str(raised.value)
    assert "laneway" in str(raised.value)


# -- conflicts between plugins given directly ------------------------------------------------------


def _kind_plugin(*names: str) -> object:
    class KindPlugin:
        @hookimpl
        def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
            for name in names:
                register(ActionKind(name, "durable"))

    return KindPlugin()


def _guard_plugin(name: str) -> object:
    class GuardPlugin:
        @hookimpl
        def laneway_register_guards(self, register: Callable[[GuardKind], None]) -> None:
            register(GuardKind(name, validate=dict, evaluate=lambda ctx, cfg: GuardResult(True)))

    return GuardPlugin()


def test_two_plugins_declaring_one_kind_stop_the_host_naming_both(sqlite_url: str) -> None:
    selection = PluginSelection(
        extra=(("alpha", _kind_plugin("shared_kind")), ("beta", _kind_plugin("shared_kind"))),
        entry_points=False,
    )

    with pytest.raises(RegistryError, match="'shared_kind'") as raised:
        Host.open(sqlite_url, plugins=selection)

    assert "'alpha'" in str(raised.value)
    assert "'beta'" in str(raised.value)


def test_kind_conflict_names_the_first_declarer_first() -> None:
    """Hooks are collected in plugin registration order (core, then entry points by name, then
    extras), so the plugin that declared a kind first is the one named as holding it."""
    selection = PluginSelection(
        extra=(("alpha", _kind_plugin("shared_kind")), ("beta", _kind_plugin("shared_kind"))),
        entry_points=False,
    )

    with pytest.raises(RegistryError) as raised:
        _registry(selection)

    assert "declared by two plugins: 'alpha' and 'beta'" in str(raised.value)


def test_a_plugin_cannot_take_over_a_core_kind() -> None:
    selection = PluginSelection(extra=(("mover", _kind_plugin("move_to_next")),))

    with pytest.raises(RegistryError, match="'move_to_next'") as raised:
        _registry(selection)

    assert "'core'" in str(raised.value)
    assert "'mover'" in str(raised.value)


def test_two_plugins_declaring_one_guard_are_refused_naming_both() -> None:
    selection = PluginSelection(
        allow=BUILTIN | {"quorum2"}, extra=(("quorum2", _guard_plugin("wait_for_quorum")),)
    )

    with pytest.raises(RegistryError, match="'wait_for_quorum'") as raised:
        _registry(selection)

    assert "'office'" in str(raised.value)
    assert "'quorum2'" in str(raised.value)


def test_duplicate_plugin_names_are_refused() -> None:
    twice = PluginSelection(
        extra=(("twin", _kind_plugin("a_kind")), ("twin", _kind_plugin("b_kind"))),
        entry_points=False,
    )
    shadowing = PluginSelection(allow=BUILTIN, extra=(("office", _kind_plugin("c_kind")),))
    reserved = PluginSelection(extra=(("core", _kind_plugin("d_kind")),), entry_points=False)

    with pytest.raises(PluginError, match="two plugins are named 'twin'"):
        _load(twice)
    with pytest.raises(PluginError, match="two plugins are named 'office'"):
        _load(shadowing)
    with pytest.raises(PluginError, match="'core' is reserved"):
        _load(reserved)


def test_misspelled_hook_name_fails_check_pending() -> None:
    class Typo:
        @hookimpl
        def laneway_regster_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
            register(ActionKind("never_registered", "durable"))

    with pytest.raises(PluginError, match="laneway_regster_action_kinds"):
        _load(PluginSelection(extra=(("typo", Typo()),), entry_points=False))


def test_extra_plugin_given_as_module_name_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "extra_kinds_mod.py").write_text(
        textwrap.dedent(
            """
            from core.plugin.kinds import ActionKind
            from plugins import hookimpl

            @hookimpl
            def laneway_register_action_kinds(register):
                register(ActionKind("extra_kind", "durable"))
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    registry = _registry(PluginSelection(extra=(("extra", "extra_kinds_mod"),), entry_points=False))

    assert registry.kinds["extra_kind"].plugin == "extra"
    assert _info(registry, "extra").enabled


# -- the installed plugins, kept between processes (issue 45 item 6) ------------------------------


@pytest.fixture
def kept_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The entry points' kept file in the test's own folder, written as where bytecode is."""
    from core.plugin import loading

    where = tmp_path / "entry-points.bin"
    monkeypatch.setattr(loading.kept, "beside", lambda *_a: where)
    monkeypatch.setattr(loading.sys, "dont_write_bytecode", False)
    monkeypatch.setattr(loading, "_INSTALLED", {})
    return where


def _names() -> list[str]:
    from core.plugin import loading

    loading._INSTALLED.clear()  # as a new process starts: only the kept file is left
    return [ep.name for ep, _dist, _version in loading._installed()]


def test_issue_45_item_6_installed_plugins_are_kept_and_a_new_install_is_found(
    kept_scan: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process on an unchanged path takes the plugins from the kept file without reading a
    distribution; one installed since (its directory's mtime moved) is found by a new scan."""
    from core.plugin import loading

    site = _fake_distribution(
        tmp_path / "site", "first_plugin", "1.0", "[laneway.plugins]\nfirst = first_mod\n",
        {"first_mod": "X = 1\n"},
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(site))
    assert "first" in _names()
    assert not kept_scan.exists()  # installed a moment ago: maybe still being written
    _settled(site)
    monkeypatch.setattr(loading, "SETTLED_NS", 0)  # and the path's other folders settled too
    assert "first" in _names()
    assert kept_scan.exists()

    real_scan = loading._scan

    def no_scan() -> Any:
        raise AssertionError("read the distributions though the path is unchanged")

    monkeypatch.setattr(loading, "_scan", no_scan)
    served = _names()
    assert "first" in served
    assert ("first", "first_mod", "first_plugin", "1.0") in [
        (ep.name, ep.value, dist, version) for ep, dist, version in loading._installed()
    ]

    _fake_distribution(
        site, "second_plugin", "2.0", "[laneway.plugins]\nsecond = second_mod\n",
        {"second_mod": "Y = 2\n"},
    )  # fmt: skip
    monkeypatch.setattr(loading, "_scan", real_scan)
    assert {"first", "second"} <= set(_names())


def _settled(folder: Path) -> None:
    """As if `folder` had last changed a minute ago (an install finished long before)."""
    import os

    past = os.stat(folder).st_mtime_ns - 60_000_000_000
    os.utime(folder, ns=(past, past))


def test_issue_45_item_6_a_replaced_lookup_is_never_served_from_the_kept_file(
    kept_scan: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup that is not importlib's (a test's own) answers for itself: the installed
    plugins kept by a real scan are not its answer, and its answer is not kept."""
    from core.plugin import loading

    monkeypatch.setattr(loading, "SETTLED_NS", 0)  # the path's folders count as settled
    assert "kanban" in _names()
    written = kept_scan.read_bytes()
    monkeypatch.setattr(loading, "distributions", lambda: iter(()))
    assert _names() == []
    assert kept_scan.read_bytes() == written
