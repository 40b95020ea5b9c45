"""Loading plugins: the entry-point loop, allow- and block-lists, and a typed facade.

We own the entry-point loop instead of calling pluggy's ``load_setuptools_entrypoints``: one
plugin whose import raises is reported with its distribution and skipped (or raised, in
strict mode), and two entry points with one name are caught instead of the second being
silently dropped. Each bundle build gets a fresh ``PluginManager``: nothing is global.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, cast

import attrs
import click
import pluggy
from loguru import logger

from core.model import Task, Workspace
from core.runtime.failures import AgentFailure
from plugins import hookspecs

GROUP = "laneway.plugins"
ESSENTIAL = "core"
"""core's own plugin (the structural kinds) cannot be blocked."""


class Keep:
    """The "leave it as it is" value of `PluginSelection.with_lists`."""


KEEP = Keep()


class PluginError(RuntimeError):
    """A plugin could not be loaded (strict mode) or the plugin set is inconsistent."""


@attrs.frozen
class PluginInfo:
    """What `laneway plugins list` shows for one plugin."""

    name: str
    version: str | None
    distribution: str | None
    enabled: bool
    blocked: bool = False
    error: str | None = None


@attrs.frozen
class PluginSelection:
    """Which plugins a host loads.

    :param allow: when not None, only these entry-point names load (empty: none but core).
    :param block: these entry-point names never load.
    :param extra: plugins given directly as (name, module or object), e.g. by tests.
    :param entry_points: whether to look at installed entry points at all.
    :param strict: raise on the first plugin that fails to load instead of reporting it.
    """

    allow: frozenset[str] | None = None
    block: frozenset[str] = frozenset()
    extra: tuple[tuple[str, object], ...] = ()
    entry_points: bool = True
    strict: bool = False

    @classmethod
    def from_env(cls, **overrides: Any) -> PluginSelection:
        """Read ``LANEWAY_PLUGINS_ALLOW`` / ``LANEWAY_PLUGINS_BLOCK`` (comma-separated)."""
        allow_env = os.environ.get("LANEWAY_PLUGINS_ALLOW")
        block_env = os.environ.get("LANEWAY_PLUGINS_BLOCK", "")
        values: dict[str, Any] = {
            "allow": _names(allow_env) if allow_env is not None else None,
            "block": _names(block_env),
        }
        values.update(overrides)
        return cls(**values)

    def with_lists(
        self,
        allow: Iterable[str] | Keep | None = KEEP,
        block: Iterable[str] | Keep = KEEP,
    ) -> PluginSelection:
        """This selection with new lists; a list not given is kept, `allow=None` lifts the
        allow-list."""
        values: dict[str, Any] = {}
        if not isinstance(allow, Keep):
            values["allow"] = frozenset(allow) if allow is not None else None
        if not isinstance(block, Keep):
            values["block"] = frozenset(block)
        return attrs.evolve(self, **values)


def _names(value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


@attrs.frozen
class LoadedPlugins:
    manager: pluggy.PluginManager
    infos: tuple[PluginInfo, ...]
    modules: dict[str, str] = attrs.field(factory=dict)
    """plugin name -> module name, for diagnostics."""


def _dist_of(ep: EntryPoint) -> tuple[str | None, str | None]:
    dist = ep.dist
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


def load_plugins(
    selection: PluginSelection, builtins: Iterable[tuple[str, object]] = ()
) -> LoadedPlugins:
    """Build a fresh plugin manager holding the selected plugins."""
    pm = pluggy.PluginManager("laneway")
    pm.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    modules: dict[str, str] = {}

    def add(name: str, plugin: object, version: str | None, dist: str | None) -> None:
        if pm.has_plugin(name) or name in modules:
            raise PluginError(f"two plugins are named {name!r} ({modules.get(name)} and {dist})")
        pm.register(plugin, name=name)
        modules[name] = getattr(plugin, "__name__", type(plugin).__name__)
        infos.append(PluginInfo(name, version, dist, enabled=True))

    for name, plugin in builtins:
        add(name, plugin, None, "laneway")

    candidates: list[tuple[str, Callable[[], object], str | None, str | None]] = []
    if selection.entry_points:
        seen: dict[str, str | None] = {}
        for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
            dist, version = _dist_of(ep)
            if ep.name in seen:
                if seen[ep.name] == dist:
                    continue  # the same distribution seen twice on sys.path
                raise PluginError(
                    f"two plugins are named {ep.name!r} (distributions {seen[ep.name]} and {dist})"
                )
            seen[ep.name] = dist
            candidates.append((ep.name, ep.load, version, dist))
    for name, obj in selection.extra:
        candidates.append((name, functools.partial(_resolve, obj), None, None))

    if selection.allow is not None and selection.entry_points:
        known = {name for name, *_rest in candidates}
        for stray in sorted(selection.allow - known - {ESSENTIAL}):
            logger.bind(plugin=stray, known=sorted(known)).warning(
                "LANEWAY_PLUGINS_ALLOW names a plugin that is not installed"
            )
    for name, loader, version, dist in candidates:
        if name == ESSENTIAL:
            raise PluginError(f"plugin name {ESSENTIAL!r} is reserved (distribution {dist})")
        allowed = selection.allow is None or name in selection.allow
        if name in selection.block or not allowed:
            infos.append(PluginInfo(name, version, dist, enabled=False, blocked=True))
            continue
        try:
            plugin = loader()
        except Exception as exc:
            if selection.strict:
                raise PluginError(
                    f"plugin {name!r} from {dist or 'unknown distribution'} failed to load: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            error = f"{type(exc).__name__}: {exc}"
            logger.bind(plugin=name, distribution=dist, error=error).warning(
                "plugin failed to load; skipped"
            )
            infos.append(PluginInfo(name, version, dist, enabled=False, error=error))
            continue
        add(name, plugin, version, dist)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin hook problem: {exc}") from exc
    return LoadedPlugins(pm, tuple(infos), modules)


def _resolve(obj: object) -> object:
    if isinstance(obj, str):
        return importlib.import_module(obj)
    return obj


@attrs.frozen
class Hooks:
    """Typed calls over ``pm.hook``: the one place where pluggy's untyped results are cast."""

    manager: pluggy.PluginManager

    def task_ownership(self, task: Task, workspace: Workspace) -> str | None:
        return cast(
            "str | None", self.manager.hook.laneway_task_ownership(task=task, workspace=workspace)
        )

    def agent_failed(self, host: object, failure: AgentFailure) -> None:
        self.manager.hook.laneway_agent_failed(host=host, failure=failure)

    def host_started(self, host: object) -> None:
        self.manager.hook.laneway_host_started(host=host)

    def cli_commands(self, group: click.Group) -> None:
        self.manager.hook.laneway_cli_commands(group=group)
