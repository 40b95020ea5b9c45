"""What loading plugins produced: the set of plugins, their listing, and the error a load raises.

Apart from `core.plugin.loading` (which re-exports these names, and is what builds them) so
that the ledger side (the registry, the guard loop, `import core.ledger`) can name a loaded
plugin set without importing pluggy or the entry-point loop: only a host that loads plugins
pays for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

from core.errors import LanewayError

if TYPE_CHECKING:
    import pluggy

__all__ = ["ESSENTIAL", "LoadedPlugins", "PluginError", "PluginInfo"]

ESSENTIAL = "core"
"""core's own plugin (the structural kinds) cannot be blocked."""


class PluginError(LanewayError):
    """A plugin could not be loaded or failed in a hook (strict mode), or the plugin set is
    inconsistent (two plugins with one name, an unknown hook)."""

    code: ClassVar[str] = "plugin"


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
