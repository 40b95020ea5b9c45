"""Logging setup. laneway is a library first: it adds no handler and stays silent until the
application (the `laneway` command, or a host's own code) calls `enable`.

Every laneway module that logs takes `logger` from here, not from loguru, so laneway's packages
are silenced before any of them can log, and `import core` alone does not import loguru:
loguru builds its default stderr handler when it is first imported (unless `LOGURU_AUTOINIT`
is false), and that handler is its first importer's. The console script, whose process is the
command line's, imports loguru without it (`core.console`): it would remove it anyway, and
building a handler lists the library folders of every `sysconfig` install scheme (~3 ms).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, TextIO

from loguru import logger

__all__ = ["PACKAGES", "disable", "enable", "logger"]

PACKAGES = ("core", "plugins", "kanban_plugin", "office_plugin")


def disable() -> None:
    for name in PACKAGES:
        logger.disable(name)


disable()


def enable(
    *, level: str | int = "WARNING", json: bool = False, stream: TextIO | None = None
) -> int:
    """Route records at `level` and above to `stream` (stderr); returns the loguru handler id.

    For the application (the `laneway` command): it enables every package's records, so a
    plugin that disabled its own at import, as loguru's library recipe says, is heard too.
    `level` is a level name in any case (`"info"`) or a number. loguru's own default handler,
    which prints everything down to DEBUG on stderr, is removed if it is still installed:
    otherwise it would print what `level` leaves out.
    """
    if isinstance(level, str):
        name = level.strip().upper()
        try:
            logger.level(name)
        except ValueError:
            raise ValueError(f"logging level {level!r}: no such level") from None
        level = name
    with contextlib.suppress(ValueError):
        logger.remove(0)  # loguru's default stderr handler (already gone: nothing to do)
    logger.enable("")
    sink: Any = stream or sys.stderr
    if json:
        return logger.add(sink, level=level, serialize=True)
    return logger.add(sink, level=level, format=_one_line, colorize=False)


_FIRST = ("why", "cause")
"""Fields that say what went wrong: they follow the message, the rest go in brackets."""


def _one_line(record: Any) -> str:
    """`LEVEL: message: why (key=value, ...)` on one line, for a person reading stderr: the
    record's fields as words, not a Python dict (`--log-json` keeps them as fields)."""
    extra = record["extra"]
    text = str(record["message"])
    for key in _FIRST:
        if extra.get(key) not in (None, ""):
            text += f": {extra[key]}"
    rest = [f"{k}={v}" for k, v in extra.items() if k not in _FIRST and not k.startswith("_")]
    if rest:
        text += f" ({', '.join(rest)})"
    extra["_line"] = " ".join(text.split())
    return "{level}: {extra[_line]}\n{exception}"
