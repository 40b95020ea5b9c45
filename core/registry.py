"""The action-kind and guard registry, built from what plugins declared.

Built once per bundle. A kind whose feature the host turned off keeps its declaration (so it
is recognised and durable) and loses its executor; the dispatcher then skips it with
`no_executor`. A kind nobody declares is unknown here; the dispatcher skips it with
`unrecognised`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from core.kinds import ActionKind, Features, GuardKind
from plugins.manager import Hooks, LoadedPlugins, PluginInfo


class RegistryError(RuntimeError):
    """Two plugins declared one name, or a declaration is malformed."""


@attrs.frozen
class RegisteredKind:
    kind: ActionKind
    plugin: str
    executable: bool
    """False when the kind's feature is off (or it declares no executor)."""


@attrs.frozen
class RegisteredGuard:
    guard: GuardKind
    plugin: str
    enabled: bool


@attrs.frozen
class Registry:
    kinds: Mapping[str, RegisteredKind]
    guards: Mapping[str, RegisteredGuard]
    plugins: tuple[PluginInfo, ...]
    features: Features
    hooks: Hooks

    def kind(self, name: str) -> RegisteredKind | None:
        return self.kinds.get(name)

    def guard(self, name: str) -> RegisteredGuard | None:
        return self.guards.get(name)

    def kinds_of(self, plugin: str) -> list[str]:
        return sorted(n for n, k in self.kinds.items() if k.plugin == plugin)

    def guards_of(self, plugin: str) -> list[str]:
        return sorted(n for n, g in self.guards.items() if g.plugin == plugin)


def build_registry(loaded: LoadedPlugins, features: Features) -> Registry:
    hooks = Hooks(loaded.manager)
    kinds: dict[str, RegisteredKind] = {}
    guards: dict[str, RegisteredGuard] = {}

    for plugin_name, impl in _impls(loaded, "laneway_register_action_kinds"):

        def register_kind(kind: ActionKind, _plugin: str = plugin_name) -> None:
            if not isinstance(kind, ActionKind):
                raise RegistryError(f"plugin {_plugin!r} registered {kind!r}, not an ActionKind")
            if kind.name in kinds:
                raise RegistryError(
                    f"action kind {kind.name!r} is declared by two plugins: "
                    f"{kinds[kind.name].plugin!r} and {_plugin!r}"
                )
            executable = kind.execute is not None and features.enabled(kind.feature)
            kinds[kind.name] = RegisteredKind(kind, _plugin, executable)

        impl(register=register_kind)

    for plugin_name, impl in _impls(loaded, "laneway_register_guards"):

        def register_guard(guard: GuardKind, _plugin: str = plugin_name) -> None:
            if guard.name in guards:
                raise RegistryError(
                    f"guard {guard.name!r} is declared by two plugins: "
                    f"{guards[guard.name].plugin!r} and {_plugin!r}"
                )
            guards[guard.name] = RegisteredGuard(guard, _plugin, features.enabled(guard.feature))

        impl(register=register_guard)

    infos = tuple(_with_feature_state(info, kinds, guards, features) for info in loaded.infos)
    return Registry(kinds, guards, infos, features, hooks)


def _impls(loaded: LoadedPlugins, hook: str) -> list[tuple[str, Any]]:
    caller = getattr(loaded.manager.hook, hook)
    # get_hookimpls() lists implementations in registration order: core, then plugins.
    return [
        (loaded.manager.get_name(impl.plugin) or "?", impl.function)
        for impl in caller.get_hookimpls()
    ]


def _with_feature_state(
    info: PluginInfo,
    kinds: Mapping[str, RegisteredKind],
    guards: Mapping[str, RegisteredGuard],
    features: Features,
) -> PluginInfo:
    """A plugin whose feature is off is listed (with its kinds) but not enabled."""
    if not info.enabled:
        return info
    declared = [k.kind.feature for k in kinds.values() if k.plugin == info.name] + [
        g.guard.feature for g in guards.values() if g.plugin == info.name
    ]
    if any(f is not None and not features.enabled(f) for f in declared):
        return attrs.evolve(info, enabled=False)
    return info
