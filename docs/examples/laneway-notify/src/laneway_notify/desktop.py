"""A desktop notifier on top of laneway's ``task.needs_person`` event (issue 42 item 2).

Whenever a process with this plugin loaded commits a ``task.needs_person`` event (a worker
whose agent asks for a permission or fails, a ``laneway task block`` command, ``serve``
answering a person's request), the person at that machine's desktop is told: ``notify-send``
where it is on PATH, or the command ``LANEWAY_NOTIFY_COMMAND`` names (split like a shell
line; the title and the body are appended as its last two arguments). ``LANEWAY_NOTIFY_COMMAND=off``
turns it off. The command is started and left to run (never waited on): a slow notifier never
holds the change that committed.

This tells people at the machines that run laneway. For a person anywhere else, a webhook on
``task.needs_person`` is the way (``laneway hook add URL --events task.needs_person``,
laneway's docs/operations.md "Being called").
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any, Final, Protocol

ENV_COMMAND: Final = "LANEWAY_NOTIFY_COMMAND"
WAITS_FOR: Final[Mapping[str, str]] = {
    "permission": "its agent asks for permission",
    "question": "its agent asks a question",
    "verdict": "it waits for a verdict",
    "failure": "its agent failed",
    "blocked": "an unfinished task blocks it",
}


class Titles(Protocol):
    """Where a task's title is read (a host's ``tasks``)."""

    def get(self, ref: str) -> Any: ...


def command(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The notifier's command, or None: off, or nothing to run."""
    env = os.environ if environ is None else environ
    given = env.get(ENV_COMMAND, "").strip()
    if given.lower() == "off":
        return None
    if given:
        return shlex.split(given)
    found = shutil.which("notify-send", path=env.get("PATH"))
    return [found, "--app-name=laneway"] if found else None


def message(data: Mapping[str, Any], title: str) -> tuple[str, str]:
    """The notification's title and body for a ``task.needs_person`` event's fields."""
    reason = str(data.get("reason", ""))
    what = WAITS_FOR.get(reason, "it waits for a person")
    error = data.get("error")
    if reason == "failure" and error:
        what = f"{what}: {error}"
    return f"laneway: “{title}” needs you", what


def notify(event: Any, titles: Titles | None) -> bool:
    """Tell the desktop about ``event`` when it is a ``task.needs_person``; True when a
    notifier was started."""
    if event.type != "task.needs_person" or not event.task_id:
        return False
    argv = command()
    if argv is None:
        return False
    # imported here: a command that loads the plugin and tells no desktop imports no loguru
    from loguru import logger

    title = str(event.task_id)
    if titles is not None:
        # a title is a nicety: when it cannot be read, the id still says which task
        with contextlib.suppress(Exception):
            title = str(titles.get(event.task_id).title)
    head, body = message(event.data, title)
    try:
        subprocess.Popen(  # the person's own configured command
            [*argv, head, body],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        logger.bind(command=argv[0], cause=str(exc)).warning("desktop notifier did not start")
        return False
    logger.bind(task_id=event.task_id, reason=event.data.get("reason")).info(
        "desktop notified: a task needs a person"
    )
    return True
