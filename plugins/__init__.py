"""The plugin contract: hook specifications, the ``hookimpl`` marker, the kinds and the typed
host a plugin is handed, all of :mod:`plugins.api`.

Plugin authors import from here or from :mod:`plugins.api` (the same names, the same
objects)::

    from plugins import ActionKind, ConfigError, Outcome, hookimpl

This module repeats none of them: each is :mod:`plugins.api`'s, read from it when first
named (its lazy names, as there, only then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugins import api

if TYPE_CHECKING:
    from plugins.api import *  # noqa: F403 - the contract is plugins.api's, name for name

__all__ = api.__all__


def __getattr__(name: str) -> Any:
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'plugins' has no attribute {name!r}")
