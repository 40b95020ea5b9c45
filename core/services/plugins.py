from __future__ import annotations

from typing import Any

from core.plugin.loading import load_plugins
from core.plugin.registry import Registry, build_registry
from core.plugin.selection import PluginSelection
from core.services.base import Service


def plugin_rows(registry: Registry) -> list[dict[str, Any]]:
    """One row per plugin: name, version, kinds, guards, enabled, error."""
    return [
        {
            "name": info.name,
            "version": info.version,
            "kinds": registry.kinds_of(info.name),
            "guards": registry.guards_of(info.name),
            "enabled": info.enabled,
            "error": info.error,
        }
        for info in registry.plugins
    ]


def installed(selection: PluginSelection, features: Any) -> list[dict[str, Any]]:
    """The plugins a host would load with `selection` and `features`, without any database
    (what `laneway plugins list` shows right after `pip install`)."""
    from core import structural

    loaded = load_plugins(selection, builtins=[("core", structural)])
    return plugin_rows(build_registry(loaded, features))


class PluginService(Service):
    def list(self) -> list[dict[str, Any]]:
        """One row per plugin: name, version, kinds, guards, enabled, error."""
        return plugin_rows(self.peers.bundle.registry)
