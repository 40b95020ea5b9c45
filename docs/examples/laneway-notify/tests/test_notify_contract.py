"""`notify` against laneway's action-kind contract (the kit in `plugins.testing`).

Subclassing `ActionKindContract` is the whole test: the kit opens hosts on a scratch database
with exactly this plugin loaded, drives tasks into a step declaring `notify` through every
entry path, replays entries, restarts hosts, crashes a child process after the write, and
checks config validation, failure reporting and the log records.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plugins.api import PluginHost, Task
from plugins.testing.contract import ActionKindContract

import laneway_notify
from laneway_notify.port import read_notifications


class TestNotifyKind(ActionKindContract):
    plugin = laneway_notify
    plugin_name = "notify"
    kind = "notify"
    supports_replay_key = True
    invalid_configs = (
        {},
        {"message": ""},
        {"message": 3},
        {"message": "two\nlines"},
        {"message": "ready", "file": ""},
        {"message": "ready", "colour": "red"},
    )

    @property
    def notifications(self) -> Path:
        return self.tmp_path / "notifications.jsonl"

    @property
    def valid_config(self) -> Mapping[str, Any]:
        return {"message": "ready for review", "file": str(self.notifications)}

    @property
    def failing_config(self) -> Mapping[str, Any]:
        # a directory that does not exist: the write fails, and the kind must say so
        return {"message": "ready", "file": str(self.tmp_path / "missing" / "n.jsonl")}

    def effect_probe(self, host: PluginHost, task: Task) -> int:
        return sum(1 for n in read_notifications(self.notifications) if n["task_id"] == task.id)
