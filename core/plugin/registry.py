"""The action-kind and guard registry, built from what plugins declared.

Built once per bundle. A kind whose feature the host turned off keeps its declaration (so it
is recognised and durable) and loses its executor; the dispatcher then skips it with
`no_executor`. A kind nobody declares is unknown here; the dispatcher skips it with
`unrecognised`.

Each plugin's registration runs in its own guard: a plugin that raises (or registers
something that is not a declaration) is reported by name, its declarations are dropped, it
is unregistered from the bundle's plugin manager (none of its hooks runs) and listed as not
enabled with the error; the others load. In strict mode (`PluginSelection.strict`), and
always for core's own plugin, the failure is a `PluginError` instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import ClassVar

import attrs

from core.errors import LanewayError
from core.plugin.calls import (
    HookCall,
    Hooks,
    guarded,
    hook_calls,
    hook_failure,
    report_hook_failure,
)
from core.plugin.features import BUILTIN, Features
from core.plugin.kinds import ActionKind, Forge, GuardKind
from core.plugin.loaded import ESSENTIAL, LoadedPlugins, PluginError, PluginInfo


class RegistryError(LanewayError):
    """Two plugins declared one name: the host cannot choose, so it does not start."""

    code: ClassVar[str] = "registry"


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
    forges: Mapping[str, Forge] = attrs.field(factory=dict)

    @property
    def declared_features(self) -> tuple[str, ...]:
        """The features the loaded plugins declare (each kind's and guard's ``feature``), with
        the built-in ones: the switches a board may set."""
        declared = {k.kind.feature for k in self.kinds.values()} | {
            g.guard.feature for g in self.guards.values()
        }
        return tuple(sorted({f for f in declared if f is not None} | set(BUILTIN)))

    def kind(self, name: str) -> RegisteredKind | None:
        return self.kinds.get(name)

    def guard(self, name: str) -> RegisteredGuard | None:
        return self.guards.get(name)

    def nearest_kind(self, name: str) -> str | None:
        """The declared kind a typo'd `name` most likely meant, or None when none is near."""
        import difflib

        found = difflib.get_close_matches(name, list(self.kinds), n=1, cutoff=0.6)
        return found[0] if found else None

    def kinds_of(self, plugin: str) -> list[str]:
        return sorted(n for n, k in self.kinds.items() if k.plugin == plugin)

    def forge(self, name: str) -> Forge | None:
        return self.forges.get(name)

    def guards_of(self, plugin: str) -> list[str]:
        return sorted(n for n, g in self.guards.items() if g.plugin == plugin)

    def unavailable(self, name: str) -> str | None:
        """Why the action kind `name` cannot run with this registry, or None when it can.

        The one wording of it: the workflow check reports it as the problem and the
        dispatcher's WARNING carries it (``why``), so a kind nobody declares, one whose
        feature is off and one declared without an executor read the same everywhere."""
        registered = self.kinds.get(name)
        if registered is None:
            return f"kind '{name}' is not declared by any loaded plugin"
        if registered.executable:
            return None
        feature = registered.kind.feature
        if feature is not None and not self.features.enabled(feature):
            return f"kind '{name}' has no executor (feature '{feature}' is off)"
        return f"kind '{name}' has no executor (plugin '{registered.plugin}' declares no executor)"

    def unavailable_guard(self, name: str, *, on: str | None = None) -> str | None:
        """Why the guard `name` (on the kind `on`, when given) never passes, or None when it
        is evaluated: `unavailable`'s wording for guards."""
        subject = f"guard '{name}'" if on is None else f"guard '{name}' on kind '{on}'"
        registered = self.guards.get(name)
        if registered is None:
            return f"{subject} is not declared by any loaded plugin"
        if registered.enabled:
            return None
        feature = registered.guard.feature
        if feature is not None:
            return f"{subject} never passes (feature '{feature}' is off)"
        return f"{subject} never passes (plugin '{registered.plugin}' disabled it)"


def build_registry(loaded: LoadedPlugins, features: Features) -> Registry:
    kinds: dict[str, RegisteredKind] = {}
    guards: dict[str, RegisteredGuard] = {}
    forges: dict[str, Forge] = {}
    forge_plugins: dict[str, str] = {}
    failed_plugins: dict[str, str] = {}

    def register_kind(kind: ActionKind, plugin: str) -> None:
        if not isinstance(kind, ActionKind):
            raise TypeError(f"registered {kind!r}, not an ActionKind")
        if kind.name in kinds:
            raise RegistryError(
                f"action kind {kind.name!r} is declared by two plugins: "
                f"{kinds[kind.name].plugin!r} and {plugin!r}"
            )
        executable = kind.execute is not None and features.enabled(kind.feature)
        kinds[kind.name] = RegisteredKind(kind, plugin, executable)

    def register_guard(guard: GuardKind, plugin: str) -> None:
        if not isinstance(guard, GuardKind):
            raise TypeError(f"registered {guard!r}, not a GuardKind")
        if guard.name in guards:
            raise RegistryError(
                f"guard {guard.name!r} is declared by two plugins: "
                f"{guards[guard.name].plugin!r} and {plugin!r}"
            )
        guards[guard.name] = RegisteredGuard(guard, plugin, features.enabled(guard.feature))

    def register_forge(forge: Forge, plugin: str) -> None:
        if not isinstance(forge, Forge):
            raise TypeError(f"registered {forge!r}, not a Forge")
        if forge.name in forges:
            raise RegistryError(
                f"forge {forge.name!r} is declared by two plugins: "
                f"{forge_plugins[forge.name]!r} and {plugin!r}"
            )
        forges[forge.name] = forge
        forge_plugins[forge.name] = plugin

    hooks = (
        ("laneway_register_action_kinds", register_kind),
        ("laneway_register_guards", register_guard),
        ("laneway_register_forges", register_forge),
    )

    def failed(call: HookCall, exc: Exception) -> None:
        if isinstance(exc, RegistryError):
            raise exc  # a conflict between two plugins: neither is the one to skip
        if loaded.strict or call.plugin == ESSENTIAL:
            raise PluginError(hook_failure(call.plugin, call.hook, exc)) from exc
        failed_plugins[call.plugin] = report_hook_failure(call.plugin, call.hook, exc, skipped=True)
        _drop(loaded, call.plugin, kinds, guards)
        for name in [n for n, p in forge_plugins.items() if p == call.plugin]:
            del forges[name], forge_plugins[name]

    for hook, register in hooks:
        # registration order (core, then plugins), so a conflict names the first declarer first
        calls = list(reversed(hook_calls(loaded.manager, hook)))

        def run(call: HookCall, register: Callable[..., None] = register) -> None:
            if call.plugin not in failed_plugins:
                call(register=functools.partial(register, plugin=call.plugin))

        for _done in guarded(calls, run, failed):
            pass

    infos = tuple(
        attrs.evolve(info, enabled=False, error=failed_plugins[info.name])
        if info.name in failed_plugins
        else _with_feature_state(info, kinds, guards, features)
        for info in loaded.infos
    )
    return Registry(
        kinds, guards, infos, features, Hooks(loaded.manager, strict=loaded.strict), forges
    )


def _drop(
    loaded: LoadedPlugins,
    plugin: str,
    kinds: dict[str, RegisteredKind],
    guards: dict[str, RegisteredGuard],
) -> None:
    """Take back what a failed plugin declared, and its hooks: it is not half loaded."""
    for name in [n for n, k in kinds.items() if k.plugin == plugin]:
        del kinds[name]
    for name in [n for n, g in guards.items() if g.plugin == plugin]:
        del guards[name]
    loaded.manager.unregister(name=plugin)


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
