"""Temporary hosts with an explicit plugin list.

A test names every plugin its host loads. Installed third-party plugins never leak in: the
selection is an allow-list of exactly the named plugins. A plugin is named either by its
entry-point name (``"kanban"``: loaded from the installed distribution) or given directly as a
``(name, plugin)`` pair, where ``plugin`` is a module, an object with ``@hookimpl`` methods,
or a module path. When every plugin is given directly, installed entry points are not
consulted at all, so a plugin under test never collides with an installed copy of itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from core.host import Host
from core.plugin.selection import PluginSelection
from plugins.api import Features, PluginHost

PluginSpec = str | tuple[str, object]
"""An installed plugin's entry-point name, or ``(name, plugin)`` given directly."""


def selection_for(plugins: Iterable[PluginSpec], *, strict: bool = True) -> PluginSelection:
    """The selection loading exactly `plugins` (core's own kinds always load).

    :param strict: a named plugin that fails to import fails the open (the default: a test
        that names a plugin means to load it).
    """
    names: list[str] = []
    extra: list[tuple[str, object]] = []
    by_entry_point = False
    for spec in plugins:
        if isinstance(spec, str):
            names.append(spec)
            by_entry_point = True
        else:
            name, plugin = spec
            names.append(name)
            extra.append((name, plugin))
    return PluginSelection(
        allow=frozenset(names), extra=tuple(extra), entry_points=by_entry_point, strict=strict
    )


def open_host(
    url: str,
    plugins: Iterable[PluginSpec] = (),
    *,
    features: Features | None = None,
    recover: bool = True,
) -> Host:
    """Open a writer host on `url` loading exactly `plugins`, following the board's features.

    :param features: the board's switches for this (test's own) database: written to the
        board when they differ from it, after the host opened (its recovery scan ran with the
        board's switches as they were; a restart's runs with these).
    """
    selection = selection_for(plugins)
    host = Host.open(url, plugins=selection, recover=recover)
    if features is not None and host.features != features:
        host.set_features(**features.as_dict())
    return host


class HostFactory:
    """Opens hosts on one database for one test and closes whatever is left open at the end.

    ``open(plugins)`` opens a host; ``restart(host)`` closes it and opens a new one on the same
    database with the same plugins and features: a new epoch, and the recovery scan runs
    before it returns, exactly as after a process restart.
    """

    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.directory = directory
        """A scratch directory of the test's own (workflow files are written here)."""
        self._open: list[Host] = []
        self._specs: dict[int, tuple[tuple[PluginSpec, ...], Features]] = {}

    def open(
        self,
        plugins: Iterable[PluginSpec] = (),
        *,
        features: Features | None = None,
        recover: bool = True,
    ) -> Host:
        specs = tuple(plugins)
        chosen = features or Features()
        host = open_host(self.url, specs, features=chosen, recover=recover)
        self._open.append(host)
        self._specs[id(host)] = (specs, chosen)
        return host

    def close(self, host: Host) -> None:
        if host in self._open:
            self._open.remove(host)
            host.close()

    def restart(self, host: Host, *, recover: bool = True) -> Host:
        """Close `host` and open its successor (new epoch, recovery scan unless told not to)."""
        specs, _features = self._specs.pop(id(host), ((), host.features))
        self.close(host)
        return self.open(specs, features=host.features, recover=recover)

    def close_all(self) -> None:
        while self._open:
            self._open.pop().close()


def _host_is_a_plugin_host(host: Host) -> PluginHost:
    """Never called: mypy proves here that the host satisfies the plugin-facing protocols
    (`core.plugin.views`), so a plugin typed against them gets what it was promised."""
    return host
