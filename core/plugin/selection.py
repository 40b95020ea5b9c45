"""Which plugins a host loads: `PluginSelection`, read from the environment or given in code.

Apart from `core.plugin.loading` (which re-exports it, and loads what it selects) so that a
command that loads no plugin need not import pluggy to name a selection.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import attrs


class Keep:
    """The "leave it as it is" value of `PluginSelection.with_lists`."""


KEEP = Keep()


@attrs.frozen
class PluginSelection:
    """Which plugins a host loads.

    :param allow: when not None, only these entry-point names load (empty: none but core).
    :param block: these entry-point names never load.
    :param extra: plugins given directly as (name, module or object), e.g. by tests.
    :param entry_points: whether to look at installed entry points at all.
    :param strict: raise `PluginError` on the first plugin that fails to load, or raises
        while registering kinds, guards or commands or in ``host_started``, instead of
        reporting and skipping it. ``LANEWAY_PLUGINS_STRICT=1`` sets it from the environment.
    """

    allow: frozenset[str] | None = None
    block: frozenset[str] = frozenset()
    extra: tuple[tuple[str, object], ...] = ()
    entry_points: bool = True
    strict: bool = False

    @classmethod
    def from_env(cls, **overrides: Any) -> PluginSelection:
        """Read ``LANEWAY_PLUGINS_ALLOW`` / ``LANEWAY_PLUGINS_BLOCK`` (comma-separated) and
        ``LANEWAY_PLUGINS_STRICT`` (``1``, ``true`` or ``yes`` turn strict mode on)."""
        allow_env = os.environ.get("LANEWAY_PLUGINS_ALLOW")
        block_env = os.environ.get("LANEWAY_PLUGINS_BLOCK", "")
        strict_env = os.environ.get("LANEWAY_PLUGINS_STRICT", "")
        values: dict[str, Any] = {
            "allow": _names(allow_env) if allow_env is not None else None,
            "block": _names(block_env),
            "strict": strict_env.strip().lower() in {"1", "true", "yes"},
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
