"""The host's feature switches, keyed by the names plugins declare.

A plugin declares a feature by naming it as the ``feature`` of a kind or guard it registers
(Office's is ``office``); the registry lists the names its plugins declared
(`Registry.declared_features`), and those are the switches a board can turn off (`laneway
features set NAME=off`). A feature is on until switched off. ``office`` is laneway's own and
always known, whether or not the Office plugin is loaded.

Apart from `core.plugin.kinds` (which re-exports `Features`), so that what needs only the
switches (`import core`, every command's read of the board's settings) does not build the
classes of the kind and guard declarations.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

OFFICE = "office"
BUILTIN: tuple[str, ...] = (OFFICE,)
"""Features known whatever is loaded, listed (on by default) even when never switched."""


def _normalised(switches: Mapping[str, bool]) -> tuple[tuple[str, bool], ...]:
    merged = {name: True for name in BUILTIN} | dict(switches)
    return tuple(sorted(merged.items()))


@attrs.frozen(init=False)
class Features:
    """Host feature switches: ``Features(office=False)``, ``Features(notify=False)``. A
    feature named nowhere here is on."""

    switches: tuple[tuple[str, bool], ...]
    """(name, on) for the built-in features and each one given, by name."""

    def __init__(self, switches: Mapping[str, bool] | None = None, /, **named: bool) -> None:
        self.__attrs_init__(_normalised({**(switches or {}), **named}))

    @property
    def office(self) -> bool:
        return self.enabled(OFFICE)

    def enabled(self, feature: str | None) -> bool:
        if feature is None:
            return True
        return dict(self.switches).get(feature, True)

    def switched(self, **changes: bool) -> Features:
        """These switches with `changes` applied."""
        return Features({**dict(self.switches), **changes})

    def as_dict(self) -> dict[str, bool]:
        """``{"office": true, ...}``: what `laneway features` shows and the board stores."""
        return dict(self.switches)
