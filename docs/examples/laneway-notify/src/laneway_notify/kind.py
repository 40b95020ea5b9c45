"""The `notify` action kind: its config, its validator and its executor.

A workflow declares it like any other action::

    on_enter:
      - type: notify
        config:
          message: "ready for review"
          file: /var/log/board/notifications.jsonl   # optional: else $LANEWAY_NOTIFY_FILE
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
from plugins.api import ActionContext, ActionFailed, ActionKind, ConfigError, Outcome

if TYPE_CHECKING:
    from laneway_notify.port import Notifier

KIND: Final = "notify"
ENV_FILE: Final = "LANEWAY_NOTIFY_FILE"
"""Where notifications go when the declaration names no `file`."""
MAX_MESSAGE: Final = 500
RECIPIENT: Final = "notify"
"""The recipient part of the idempotency key (an agent profile id for the built-in kinds)."""
_KEYS: Final = frozenset({"message", "file"})


@attrs.frozen
class NotifyConfig:
    """The validated config: what the executor receives."""

    message: str
    file: str | None = None


def validate(config: Mapping[str, Any]) -> NotifyConfig:
    """Raise ConfigError naming the field for anything the executor could not use.

    laneway calls this at import (a workflow declaring a malformed `notify` is refused while
    this plugin is loaded) and again at dispatch (a malformed config that got in while it was
    not loaded is skipped as `malformed`).
    """
    unknown = sorted(set(config) - _KEYS)
    if unknown:
        raise ConfigError(
            f"notify: unknown key {unknown[0]!r} (known: file, message)",
            field=f"config.{unknown[0]}",
        )
    message = config.get("message")
    if not isinstance(message, str) or not message.strip():
        raise ConfigError("notify needs config.message, a non-empty string", field="config.message")
    if "\n" in message or len(message) > MAX_MESSAGE:
        raise ConfigError(
            f"notify config.message must be one line of at most {MAX_MESSAGE} characters",
            field="config.message",
        )
    file = config.get("file")
    if file is not None and (not isinstance(file, str) or not file.strip()):
        raise ConfigError("notify config.file must be a non-empty path", field="config.file")
    return NotifyConfig(message=message.strip(), file=file)


def notifier_for(path: Path) -> Notifier:
    """The adapter behind the port (one, here: a file)."""
    # Imported when a notification is sent, not when the plugin loads: every write command
    # loads the plugin, few of them notify.
    from laneway_notify.port import FileNotifier

    return FileNotifier(path)


def notify(ctx: ActionContext, config: NotifyConfig) -> Outcome:
    """Append the notification, at most once per entry and position.

    The key comes from ``ctx.idempotency_key``: laneway builds it from the entry identity and
    the action's position (plus the canonical config), so when the recovery scan re-runs this
    action after a crash between the write and the done-marker, the file already holds the
    key and nothing is written twice. A new arrival at the step is a new entry: a new key.
    """
    target = config.file or os.environ.get(ENV_FILE)
    if not target:
        raise ActionFailed(f"no notification file: set config.file or {ENV_FILE}")
    path = Path(target)
    key = ctx.idempotency_key(RECIPIENT, {"message": config.message, "file": config.file})
    log = ctx.logger.bind(notify_file=str(path), idempotency_key=key)
    from laneway_notify.port import Notification

    notification = Notification(
        key=key,
        task_id=ctx.task.id,
        step_id=ctx.step.id,
        step_name=ctx.step.name,
        entry_path=ctx.entry_path,
        message=config.message,
    )
    try:
        delivered = notifier_for(path).send(notification)
    except OSError as exc:
        # Reported, never swallowed: the marker records failed(cause) and the entry goes on.
        raise ActionFailed(f"cannot write notification file {path}: {exc.strerror}") from None
    if delivered:
        log.info("notification written")
    else:
        log.info("notification already written for this entry; not repeated")
    return Outcome.done()


DECLARATION: Final = ActionKind(
    KIND,
    "durable",
    execute=notify,
    validate=validate,
    description="append a notification line to a file, once per entry",
)
