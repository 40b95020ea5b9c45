"""The port the `notify` kind writes through, and its one adapter: an append-only file.

The executor knows only `Notifier`: to post to a chat or a webhook instead, write another
adapter with the same `send` and pick it in `laneway_notify.kind.notifier_for`. Whatever the
adapter, it must honour the notification's key: a second `send` with a key it has already
delivered delivers nothing. That is what makes a replayed entry (recovery after a crash)
notify once.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any, Protocol

import attrs


@attrs.frozen
class Notification:
    """One notification: what happened, and the key that identifies this delivery."""

    key: str | None
    """``ctx.idempotency_key(...)``: the same on a replay of one entry, new on a re-entry.
    None (a trigger without an entry or operation id): no deduplication."""
    task_id: str
    step_id: str
    step_name: str
    entry_path: str | None
    message: str

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


class Notifier(Protocol):
    def send(self, notification: Notification) -> bool:
        """Deliver `notification`; False when one with the same key was delivered before.

        Raises OSError (or the adapter's own error) when it cannot deliver.
        """
        ...


@attrs.frozen
class FileNotifier:
    """Appends one JSON line per notification to `path`.

    The check for an earlier line with the same key and the append happen under an
    exclusive ``flock`` on the file, so two processes or threads never both write one key.
    The file is read whole for the check: fine for an example, not for a busy board.
    """

    path: Path

    def send(self, notification: Notification) -> bool:
        with self.path.open("a+", encoding="utf-8") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            try:
                if notification.key is not None:
                    out.seek(0)
                    if notification.key in self._keys(out.read()):
                        return False
                out.write(json.dumps(notification.as_json(), sort_keys=True) + "\n")
                out.flush()
                return True
            finally:
                fcntl.flock(out, fcntl.LOCK_UN)

    @staticmethod
    def _keys(text: str) -> set[str]:
        keys: set[str] = set()
        for line in text.splitlines():
            if line.strip():
                key = json.loads(line).get("key")
                if isinstance(key, str):
                    keys.add(key)
        return keys


def read_notifications(path: Path) -> list[dict[str, Any]]:
    """Every notification in a file `FileNotifier` wrote (none when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
