"""Loading plugins: the entry-point loop, allow- and block-lists, and a typed facade.

We own the entry-point loop instead of calling pluggy's ``load_setuptools_entrypoints``: one
plugin whose import raises is reported with its distribution and skipped (or raised, in
strict mode), and two entry points with one name are caught instead of the second being
silently dropped. Each bundle build gets a fresh ``PluginManager``: nothing is global.

Every hook implementation is called in its own guard (`Hooks`, and `core.registry` for the
registration hooks): one that raises is reported by plugin name as a structured record and
skipped, and the other plugins' implementations still run. `PluginSelection.strict` turns a
failure while starting (loading, registering kinds, guards or commands, ``host_started``) into
a `PluginError` instead; observers (``laneway_agent_failed``, ``laneway_task_ownership``) are
isolated in every mode.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import Distribution, EntryPoint, distributions
from typing import TYPE_CHECKING, Any, Final

import attrs
import click
import pluggy

from core.errors import LanewayError
from core.logs import logger
from core.model import Task, Workspace
from core.plugin_selection import KEEP, Keep, PluginSelection
from core.runtime.failures import AgentFailure
from plugins import hookspecs

if TYPE_CHECKING:
    from core.plugin_services import PluginHost

__all__ = [
    "DUTIES",
    "ESSENTIAL",
    "GROUP",
    "KEEP",
    "HookCall",
    "Hooks",
    "Keep",
    "LoadedPlugins",
    "PluginError",
    "PluginInfo",
    "PluginSelection",
    "hook_calls",
    "hook_failure",
    "load_plugins",
    "report_hook_failure",
]

GROUP = "laneway.plugins"
ESSENTIAL = "core"
"""core's own plugin (the structural kinds) cannot be blocked."""


class PluginError(LanewayError):
    """A plugin could not be loaded or failed in a hook (strict mode), or the plugin set is
    inconsistent (two plugins with one name, an unknown hook)."""


DUTIES: Final[Mapping[str, str]] = {
    "laneway_register_action_kinds": "register its kinds",
    "laneway_register_guards": "register its guards",
    "laneway_cli_commands": "add its commands",
    "laneway_host_started": "start with the host",
    "laneway_task_ownership": "answer task ownership",
    "laneway_agent_failed": "observe an agent failure",
    "laneway_event": "observe an event",
}
"""What each hook asks of a plugin, as a failure names it."""


def hook_failure(plugin: str, hook: str, exc: BaseException) -> str:
    """``plugin 'x' failed to register its kinds: ValueError: ...``"""
    duty = DUTIES.get(hook, f"run {hook}")
    return f"plugin {plugin!r} failed to {duty}: {type(exc).__name__}: {exc}"


def report_hook_failure(
    plugin: str,
    hook: str,
    exc: BaseException,
    *,
    skipped: bool,
    context: Mapping[str, object] | None = None,
) -> str:
    """Log one failing hook implementation as a structured ERROR record; return the message.

    Fields: ``plugin``, ``hook``, ``error`` (type and text), ``skipped`` (whether the plugin's
    contributions were dropped, as for the registration hooks, or only this call failed),
    and the `context` fields (an observer's task and session ids).
    """
    message = hook_failure(plugin, hook, exc)
    logger.bind(
        **(context or {}),
        plugin=plugin,
        hook=hook,
        error=f"{type(exc).__name__}: {exc}",
        skipped=skipped,
    ).error("plugin hook raised; the other plugins carry on")
    return message


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
class LoadedPlugins:
    manager: pluggy.PluginManager
    infos: tuple[PluginInfo, ...]
    modules: dict[str, str] = attrs.field(factory=dict)
    """plugin name -> module name, for diagnostics."""
    strict: bool = False
    """The selection's strict mode, which the registry and `Hooks` apply to hook failures."""


def _dist_of(dist: Distribution) -> tuple[str | None, str | None]:
    """A distribution's name and version, from the head of its core metadata.

    `dist.metadata` imports the `email` package and parses the whole file, long description
    (a README) included, on every access; a write command paid that for every plugin's
    distribution. Name and Version are single-line header fields, and the headers end at the
    first blank line."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    name: str | None = None
    version: str | None = None
    for line in text.splitlines():
        if not line.strip():
            break
        key, _colon, value = line.partition(":")
        key = key.strip().lower()
        if key == "name" and name is None:
            name = value.strip()
        elif key == "version" and version is None:
            version = value.strip()
    return name, version


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_INSTALLED: dict[object, tuple[tuple[EntryPoint, str | None, str | None], ...]] = {}


def _path_state() -> tuple[object, ...]:
    """What decides which distributions are installed: the path and each entry's mtime (a
    distribution installed or removed changes its directory's), as `importlib.metadata`
    itself caches by."""
    state: list[object] = [distributions]  # a test may replace the lookup itself
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, None))
    return tuple(state)


def _scan() -> tuple[tuple[EntryPoint, str | None, str | None], ...]:
    """The installed `laneway.plugins` entry points by name, each with its distribution and
    version; a distribution found twice on the path counts once, where it is found first.

    `importlib.metadata.entry_points(group=...)` parses every entry point of every installed
    distribution (a development environment has about a hundred) to keep those of one
    group; here a distribution's entry points are parsed only when its `entry_points.txt`
    names the group at all, and its metadata is read only then."""
    found: list[tuple[EntryPoint, str | None, str | None]] = []
    seen: set[str] = set()
    for dist in distributions():
        text = dist.read_text("entry_points.txt")
        if not text or GROUP not in text:
            continue
        name, version = _dist_of(dist)
        if name is not None:
            if _normalised(name) in seen:
                continue
            seen.add(_normalised(name))
        found.extend((ep, name, version) for ep in dist.entry_points.select(group=GROUP))
    return tuple(sorted(found, key=lambda f: f[0].name))


def _installed() -> tuple[tuple[EntryPoint, str | None, str | None], ...]:
    """`_scan`, once while the path is unchanged (a test, or an application that opens
    several hosts, loads plugins more than once)."""
    key = _path_state()
    found = _INSTALLED.get(key)
    if found is None:
        found = _scan()
        _INSTALLED.clear()
        _INSTALLED[key] = found
    return found


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
        for ep, dist, version in _installed():
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
    return LoadedPlugins(pm, tuple(infos), modules, strict=selection.strict)


def _resolve(obj: object) -> object:
    if isinstance(obj, str):
        return importlib.import_module(obj)
    return obj


@attrs.frozen
class HookCall:
    """One plugin's implementation of one hook, callable with the hook's keyword arguments."""

    plugin: str
    hook: str
    function: Callable[..., Any]
    argnames: tuple[str, ...]

    def __call__(self, **kwargs: Any) -> Any:
        # as pluggy does: an implementation receives only the arguments it names
        return self.function(**{name: kwargs[name] for name in self.argnames})


def hook_calls(manager: pluggy.PluginManager, hook: str) -> list[HookCall]:
    """The implementations of `hook` in pluggy's call order (last registered first)."""
    caller = getattr(manager.hook, hook)
    return [
        HookCall(manager.get_name(impl.plugin) or "?", hook, impl.function, tuple(impl.argnames))
        for impl in reversed(caller.get_hookimpls())
    ]


@attrs.frozen
class Hooks:
    """Typed calls over the plugin manager, each implementation in its own guard."""

    manager: pluggy.PluginManager
    strict: bool = False

    def observe(
        self, hook: str, context: Mapping[str, object] | None = None, **kwargs: Any
    ) -> None:
        """Call every implementation of an observer hook; a raising one is reported (with
        the `context` fields) and the rest still run. Never raises, in strict mode too: an
        observer cannot stop the host."""
        for call in hook_calls(self.manager, hook):
            try:
                call(**kwargs)
            except Exception as exc:  # noqa: BLE001 - isolated per plugin, reported by name
                report_hook_failure(call.plugin, hook, exc, skipped=False, context=context)

    def _start(self, hook: str, **kwargs: Any) -> None:
        """Call a start-time hook per implementation: reported and skipped, or (strict)
        raised as `PluginError` naming the plugin."""
        for call in hook_calls(self.manager, hook):
            try:
                call(**kwargs)
            except Exception as exc:
                if self.strict:
                    raise PluginError(hook_failure(call.plugin, hook, exc)) from exc
                report_hook_failure(call.plugin, hook, exc, skipped=True)

    def task_ownership(self, task: Task, workspace: Workspace) -> str | None:
        """The first owner named, in pluggy's order; a raising plugin counts as no answer."""
        hook = "laneway_task_ownership"
        for call in hook_calls(self.manager, hook):
            try:
                owner = call(task=task, workspace=workspace)
            except Exception as exc:  # noqa: BLE001 - isolated per plugin, reported by name
                report_hook_failure(call.plugin, hook, exc, skipped=False)
                continue
            if owner is not None:
                return str(owner)
        return None

    def agent_failed(self, host: PluginHost, failure: AgentFailure) -> None:
        context = {"task_id": failure.task_id, "session_id": failure.session_id}
        self.observe("laneway_agent_failed", context, host=host, failure=failure)

    def host_started(self, host: PluginHost) -> None:
        self._start("laneway_host_started", host=host)

    def cli_commands(self, group: click.Group) -> list[str]:
        """Each plugin adds its commands; a plugin that raises has the commands it added
        before raising taken back, so the command line never holds half a plugin. Returns
        the failures' messages (the command line shows them once its logging is set up)."""
        hook = "laneway_cli_commands"
        failures: list[str] = []
        for call in hook_calls(self.manager, hook):
            before = set(group.commands)
            try:
                call(group=group)
            except Exception as exc:
                for name in set(group.commands) - before:
                    del group.commands[name]
                if self.strict:
                    raise PluginError(hook_failure(call.plugin, hook, exc)) from exc
                failures.append(report_hook_failure(call.plugin, hook, exc, skipped=True))
        return failures
