"""laneway: a workflow orchestrator for task boards whose cards are worked by AI agents.

The public API for hosts is `Host` (open a database, get services) and `Features`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# first, before any attrs class is made (core.model, below): their methods' bytecode is kept
import core.attrs_code
import core.runtime  # noqa: F401 - the agent wing's old module names, for one release
from core.errors import LanewayError
from core.plugin.features import Features

if TYPE_CHECKING:
    from core.host import Host


__all__ = ["Features", "Host", "LanewayError"]


def __getattr__(name: str) -> Any:
    # Host pulls in the store, plugins and engine; importing it lazily keeps `import core.x`
    # cheap for small entry points (the scripted agents run as their own processes).
    if name == "Host":
        from core.host import Host

        return Host
    raise AttributeError(f"module 'core' has no attribute {name!r}")
