"""The host's feature switches.

Apart from `core.plugin.kinds` (which re-exports `Features`), so that what needs only the switches
(`import core`, every command's read of the board's settings) does not build the classes of
the kind and guard declarations.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Features:
    """Host feature switches. Office is on unless the host turns it off."""

    office: bool = True

    def enabled(self, feature: str | None) -> bool:
        if feature is None:
            return True
        return bool(getattr(self, feature, False))
