"""The agent wing's old names: it lives in `core.agents` now (issue 37). Kept for one release:
`core.runtime.X`, `core.worker`, `core.agent_error` and `core.feedback` import the module that
took their place, the same module object (never a second copy), so code written against the
old names works unchanged until it moves. `core/__init__.py` installs the aliases."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED: dict[str, str] = {
    "core.worker": "core.agents.worker",
    "core.agent_error": "core.agents.failure",
    "core.feedback": "core.agents.feedback",
    "core.runtime.runtime": "core.agents.runtime",
    "core.runtime.arrival": "core.agents.session",
    "core.runtime.conversation": "core.agents.protocols.acp.conversation",
    "core.runtime.process": "core.agents.protocols.exec_process",
    "core.runtime.acp": "core.agents.protocols.acp",
    "core.runtime.acp.classify": "core.agents.protocols.acp.classify",
    "core.runtime.acp.client": "core.agents.protocols.acp.client",
    "core.runtime.acp.facade": "core.agents.protocols.acp.facade",
    "core.runtime.acp.items": "core.agents.protocols.acp.items",
    "core.runtime.acp.transport": "core.agents.protocols.acp.transport",
    "core.runtime.acp.values": "core.agents.values",
    "core.runtime.acp.bounds": "core.agents.bounds",
    "core.runtime.tools": "core.agents.tools",
    "core.runtime.tools.broker": "core.agents.tools.broker",
    "core.runtime.tools.server": "core.agents.tools.server",
    "core.runtime.tools.wire": "core.agents.tools.wire",
    "core.runtime.failures": "core.model",
    "core.runtime.desired": "core.agents.desired",
    "core.runtime.item_queue": "core.agents.item_queue",
    "core.runtime.watchdog": "core.agents.watchdog",
    "core.runtime.watchdog_link": "core.agents.watchdog_link",
    "core.runtime.scripted": "core.agents.scripted",
    "core.runtime.agent_env": "core.agents.environment",
}
"""Old module name -> the module that holds its code now."""


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # the new module itself: importlib keeps its name and spec (they are set already)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Already executed under its new name."""


if not any(isinstance(finder, _Moved) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Moved())
