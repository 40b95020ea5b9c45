"""Loading plugins: the entry-point loop and the allow- and block-lists.

We own the entry-point loop instead of calling pluggy's ``load_setuptools_entrypoints``: one
plugin whose import raises is reported with its distribution and skipped (or raised, in
strict mode), and two entry points with one name are caught instead of the second being
silently dropped. Each bundle build gets a fresh ``PluginManager``: nothing is global.

A plugin whose implementation is a pluggy wrapper (``wrapper=True`` / ``hookwrapper=True``)
is refused as it loads: laneway calls each implementation in its own guard
(`core.plugin.calls`), where a wrapper would never run. `PluginSelection.strict` turns a
failure while starting (loading, registering kinds, guards or commands, ``host_started``) into
a `PluginError` instead; observers (``laneway_agent_failed``, ``laneway_task_ownership``) are
isolated in every mode.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import marshal
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from importlib.metadata import Distribution, EntryPoint, distributions

import pluggy

from core import kept
from core.logs import logger
from core.plugin import specs
from core.plugin.loaded import ESSENTIAL, LoadedPlugins, PluginError, PluginInfo
from core.plugin.selection import PluginSelection

__all__ = [
    "ESSENTIAL",
    "GROUP",
    "LoadedPlugins",
    "PluginError",
    "PluginInfo",
    "load_plugins",
]

GROUP = "laneway.plugins"


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


Found = tuple[tuple[EntryPoint, str | None, str | None], ...]
"""The installed plugins' entry points, each with its distribution and version."""
PathState = tuple[tuple[str, int | None], ...]
"""The path and each entry's mtime (None: not there)."""

_INSTALLED: dict[tuple[object, PathState], Found] = {}


def _path_state() -> PathState:
    """What decides which distributions are installed: the path and each entry's mtime (a
    distribution installed or removed changes its directory's), as `importlib.metadata`
    itself caches by."""
    state: list[tuple[str, int | None]] = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, None))
    return tuple(state)


def _scan() -> Found:
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
    several hosts, loads plugins more than once), and kept between processes beside the
    bytecode (`_kept`)."""
    path = _path_state()
    key = (distributions, path)  # a test may replace the lookup itself
    found = _INSTALLED.get(key)
    if found is None:
        # a test's own lookup answers for itself: never served from the file, nor kept in it
        installed = distributions is importlib.metadata.distributions
        found = _kept(path) if installed else None
        if found is None:
            found = _scan()
            if installed:
                _keep(path, found)
        _INSTALLED.clear()
        _INSTALLED[key] = found
    return found


_KEPT = "entry-points"
"""The kept file (`core.kept`) of the last scan: a one-shot command (`laneway task move`)
spent ~3 ms reading every installed distribution's entry points to find the plugins (issue
45 item 6). It is keyed as the in-process cache is, by the path and each entry's mtime: a
distribution installed or removed changes its directory's, as `importlib.metadata` itself
relies on. A scan is kept only once every directory's mtime is `SETTLED_NS` old: a
directory's mtime has the kernel's coarse clock (a few ms), and an install may still be writing
into a distribution it just created (its `entry_points.txt` after its directory), neither of
which changes the mtime again; kept then, the scan would stay wrong for good (a process's own
cache ends with it)."""
SETTLED_NS = 2_000_000_000


def _kept(path: PathState) -> Found | None:
    try:
        stored = marshal.loads(kept.beside(__file__, _KEPT).read_bytes())
        if stored[0] != path:
            return None
        return tuple(
            (EntryPoint(name, value, GROUP), dist, version)
            for name, value, dist, version in stored[1]
        )
    except (OSError, ValueError, EOFError, TypeError, IndexError):
        return None


def _keep(path: PathState, found: Found) -> None:
    settled = time.time_ns() - SETTLED_NS
    if any(mtime is not None and mtime > settled for _entry, mtime in path):
        return  # changed a moment ago: maybe still changing, unseen by the mtime
    entries = tuple((ep.name, ep.value, dist, version) for ep, dist, version in found)
    kept.write(kept.beside(__file__, _KEPT), marshal.dumps((path, entries)))


def load_plugins(
    selection: PluginSelection, builtins: Iterable[tuple[str, object]] = ()
) -> LoadedPlugins:
    """Build a fresh plugin manager holding the selected plugins."""
    pm = pluggy.PluginManager("laneway")
    pm.add_hookspecs(specs)
    infos: list[PluginInfo] = []
    modules: dict[str, str] = {}

    def add(name: str, plugin: object, version: str | None, dist: str | None) -> None:
        if pm.has_plugin(name) or name in modules:
            raise PluginError(f"two plugins are named {name!r} ({modules.get(name)} and {dist})")
        pm.register(plugin, name=name)
        wrappers = _wrappers(pm, plugin)
        if wrappers:
            pm.unregister(plugin)
            error = (
                f"plugin {name!r} from {dist or 'unknown distribution'} implements "
                f"{', '.join(wrappers)} as a wrapper; laneway calls each implementation on "
                "its own, so wrappers are refused"
            )
            if selection.strict or dist == "laneway":
                raise PluginError(error)
            logger.bind(plugin=name, distribution=dist, error=error).warning(
                "plugin refused; skipped"
            )
            infos.append(PluginInfo(name, version, dist, enabled=False, error=error))
            return
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


def _wrappers(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The hooks `plugin` implements as a (new- or old-style) wrapper."""
    found: list[str] = []
    for caller in pm.get_hookcallers(plugin) or []:
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin and (impl.wrapper or impl.hookwrapper):
                found.append(caller.name)
    return sorted(found)
