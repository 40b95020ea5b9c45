"""The crash driver: a child process that moves a task and dies at a fault point.

The suite's crash check (``crash-at-least-once``) runs it with the plugin under test loaded
by reference, so the effect is written by a process that is then gone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from plugins.testing.faults import FaultRun, run_with_fault

CRASH_DRIVER = """
import importlib, json, sys
from core import Host
from plugins.api import Features
from core.plugin.selection import PluginSelection

url, task_id, step, plugins_json = sys.argv[1:5]

def resolve(ref):
    module, _, attr = ref.partition(":")
    found = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        found = getattr(found, part)
    return found

extra = tuple((name, resolve(ref)) for name, ref in json.loads(plugins_json))
selection = PluginSelection(
    allow=frozenset(name for name, _ in extra), extra=extra, entry_points=False, strict=True
)
with Host.open(url, plugins=selection) as host:  # the board's features, set by the parent
    host.tasks.move(task_id, step)
"""


def crash_in_child(url: str, task_id: str, step: str, refs: Sequence[Sequence[str]]) -> FaultRun:
    """Move `task_id` to `step` in a child process that dies at ``dispatch.after_effect``.

    :param refs: ``[plugin name, "module:attr"]`` pairs: the plugins the child loads.
    """
    return run_with_fault(
        CRASH_DRIVER, "dispatch.after_effect", args=[url, task_id, step, json.dumps(list(refs))]
    )
