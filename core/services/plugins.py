from __future__ import annotations

from typing import Any

from core.services.base import Service


class PluginService(Service):
    def list(self) -> list[dict[str, Any]]:
        """One row per plugin: name, version, kinds, guards, enabled, error."""
        registry = self.host.bundle.registry
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
