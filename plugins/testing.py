"""pytest plugin for laneway and its plugin authors (registered through ``pytest11``).

Import-light and inert: it only defines fixtures, which do nothing until a test asks for them.

- ``laneway_logs``: a list of loguru records (as dicts) emitted while the test runs, DEBUG and
  up, with laneway's packages enabled. Assert on ``record["extra"]`` fields, never on text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def laneway_logs() -> Iterator[list[dict[str, Any]]]:
    from loguru import logger

    from core import logs

    records: list[dict[str, Any]] = []

    def sink(message: Any) -> None:
        record = message.record
        records.append(
            {
                "level": record["level"].name,
                "message": record["message"],
                "extra": dict(record["extra"]),
                "name": record["name"],
            }
        )

    for name in logs.PACKAGES:
        logger.enable(name)
    handler = logger.add(sink, level="DEBUG")
    try:
        yield records
    finally:
        logger.remove(handler)
        logs.disable()
