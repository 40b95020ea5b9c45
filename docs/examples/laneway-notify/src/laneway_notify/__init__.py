"""laneway-notify: an example laneway plugin contributing one durable action kind, `notify`,
and a desktop notifier that tells the person at the machine when a task needs them
(`laneway_notify.desktop`, on the `task.needs_person` event).

laneway finds this module through the ``laneway.plugins`` entry point ``notify`` (see
pyproject.toml) and registers it with pluggy; the functions marked ``@hookimpl`` below are its
hook implementations. See docs/plugin-authoring.md in the laneway repository for the walk
through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plugins.api import ActionKind, PluginHost, disable_logs, hookimpl

from laneway_notify import desktop
from laneway_notify.kind import DECLARATION, ENV_FILE, KIND, NotifyConfig, notify, validate

__version__ = "0.1.0"
__all__ = [
    "ENV_FILE",
    "KIND",
    "NotifyConfig",
    "laneway_register_action_kinds",
    "notify",
    "validate",
]

# A library stays silent until the application enables it (loguru's recipe for libraries):
# `logger.enable("laneway_notify")`. The contract kit enables it while it checks the records.
# `disable_logs` is loguru's `logger.disable` without importing loguru before anything logs.
disable_logs("laneway_notify")


@hookimpl
def laneway_register_action_kinds(register: Callable[[ActionKind], None]) -> None:
    """Declare `notify`. Called each time a host builds a bundle."""
    register(DECLARATION)


_titles: list[desktop.Titles] = []
"""The tasks of the last host opened in this process: where a notification's title is read."""


@hookimpl
def laneway_host_started(host: PluginHost) -> None:
    _titles[:] = [host.tasks]


@hookimpl
def laneway_event(event: Any) -> None:
    """A task started waiting for a person: tell the desktop (`laneway_notify.desktop`)."""
    desktop.notify(event, _titles[0] if _titles else None)
