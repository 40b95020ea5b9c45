"""The scheduler through a database outage (issue 27, "Left alone" of the reconnect work): a
database that is away is one WARNING when it goes and one INFO when it is back, not an ERROR
per pass; a pass that fails for any other reason is still an ERROR each time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from loguru import logger

from core import logs as logs_module
from core.services import scheduler


class _Report:
    delivered = heartbeats = failed = 0

    def as_dict(self) -> dict[str, int]:
        return {}


class _Triggers:
    def __init__(self, outcomes: list[BaseException | None]) -> None:
        self.outcomes = outcomes

    def run_pass(self) -> _Report:
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return _Report()


class _Schedules:
    def fire_due(self) -> int:
        return 0


class _Host:
    def __init__(self, outcomes: list[BaseException | None]) -> None:
        self.triggers = _Triggers(outcomes)
        self.schedules = _Schedules()


def _lost() -> sa.exc.OperationalError:
    return sa.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    logger.enable("core")  # laneway is silent until its application enables it (core.logs)
    handler = logger.add(lambda m: seen.append(m.record), level="DEBUG")
    yield seen
    logger.remove(handler)
    logs_module.disable()


def _passes(outcomes: list[BaseException | None]) -> None:
    host: Any = _Host(outcomes)
    away = False
    while host.triggers.outcomes:
        away = scheduler.run_pass(host, away=away)


def _levels(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r["level"].name, r["message"]) for r in logs if r["level"].name != "DEBUG"]


def test_an_outage_is_one_warning_and_one_info(logs: list[dict[str, Any]]) -> None:
    """Five passes with the database away, then one that works: one WARNING (with the cause
    as a field), one INFO, no ERROR."""
    _passes([_lost(), _lost(), _lost(), _lost(), _lost(), None, None])
    levels = [level for level, _ in _levels(logs)]
    assert levels == ["WARNING", "INFO"]
    (warning,) = [r for r in logs if r["level"].name == "WARNING"]
    assert "server closed the connection" in warning["extra"]["cause"]


def test_other_failures_stay_errors(logs: list[dict[str, Any]]) -> None:
    """A pass that fails for a reason that is not the database being away is an ERROR every
    time: it is a bug or a bad declaration, not something to wait out."""
    _passes([RuntimeError("bad"), RuntimeError("bad"), None])
    assert [level for level, _ in _levels(logs)] == ["ERROR", "ERROR"]
