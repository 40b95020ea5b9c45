"""The guard docs/hooks.md shows (`has_label`), taken from the page as written, passes the
guard contract kit with the subclass docs/plugin-authoring.md shows for it."""

from __future__ import annotations

import re
import types

from core.host import Host
from core.model import Task
from plugins.testing.guard_contract import GuardBoard, GuardContract
from tests.conftest import REPO


def _documented_plugin() -> types.ModuleType:
    text = (REPO / "docs" / "hooks.md").read_text()
    section = text.split("## `laneway_register_guards(register)`", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None
    module = types.ModuleType("has_label_plugin")
    exec(compile(found.group(1), "docs/hooks.md", "exec"), module.__dict__)  # noqa: S102
    return module


class TestDocumentedHasLabel(GuardContract):
    plugin = _documented_plugin()
    plugin_name = "mine"
    guard = "has_label"
    valid_config = {"label": "urgent"}
    invalid_configs = [{}, {"label": 3}, "urgent"]

    def arrange_open(self, host: Host, board: GuardBoard, task: Task) -> None:
        host.tasks.update(task.id, title="urgent: fix the login")
