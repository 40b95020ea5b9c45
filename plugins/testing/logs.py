"""A list sink for loguru records, so tests assert on discrete fields, never on text."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from loguru import logger

from core import logs

LogRecord = dict[str, Any]
"""One captured record: ``level`` (name), ``message``, ``extra`` (the bound fields, a dict),
``name`` (the module that logged), ``thread`` (the thread id)."""


@contextmanager
def captured(packages: Iterable[str] = (), *, level: str = "DEBUG") -> Iterator[list[LogRecord]]:
    """Collect every record at `level` and up while the block runs.

    laneway's own packages are enabled for the block (a library stays silent until enabled),
    and so are `packages` (a plugin that calls ``logger.disable(<its package>)`` at import, as
    loguru recommends for libraries). On the way out they are disabled again.
    """
    records: list[LogRecord] = []

    def sink(message: Any) -> None:
        record = message.record
        records.append(
            {
                "level": record["level"].name,
                "message": record["message"],
                "extra": dict(record["extra"]),
                "name": record["name"],
                "thread": record["thread"].id,
            }
        )

    extra = [p for p in packages if p and p not in logs.PACKAGES]
    for name in (*logs.PACKAGES, *extra):
        logger.enable(name)
    handler = logger.add(sink, level=level)
    try:
        yield records
    finally:
        logger.remove(handler)
        for name in extra:
            logger.disable(name)
        logs.disable()


def matching(
    records: Iterable[LogRecord], level: str | None = None, **fields: Any
) -> list[LogRecord]:
    """Records at `level` (any level when None) whose extra fields include every `fields` item."""
    return [
        r
        for r in records
        if (level is None or r["level"] == level)
        and all(k in r["extra"] and r["extra"][k] == v for k, v in fields.items())
    ]
