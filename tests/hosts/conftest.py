"""Fixtures for the host tests: hosts with an explicit plugin list (the kit's `open_host`), and
`Gate`, a test plugin whose durable kind holds a dispatch open until the test releases it, so a
test can change the host's bundle while that dispatch is running."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from core import Features, Host
from core.model import Marker, Task
from core.plugin.kinds import ActionContext, ActionKind
from plugins import hookimpl
from plugins.testing.hosts import PluginSpec, open_host
from plugins.testing.logs import LogRecord

BUILTIN: tuple[PluginSpec, ...] = ("kanban", "office")
WAIT_S = 20.0


@attrs.define
class Gate:
    """Plugin `gate`: the durable kind `gate`. Its first execution sets `entered` and waits
    for `release`; later ones pass straight through. Each execution records its task."""

    entered: threading.Event = attrs.field(factory=threading.Event)
    release: threading.Event = attrs.field(factory=threading.Event)
    passed: list[str] = attrs.field(factory=list)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def _execute(self, ctx: ActionContext, _config: Any) -> None:
        with self._lock:
            first = not self.passed
            self.passed.append(ctx.task.id)
        if first:
            self.entered.set()
            assert self.release.wait(WAIT_S), "the gate was never released"

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("gate", "durable", execute=self._execute))


def open_with(url: str, *extra: tuple[str, object], office: bool = True) -> Host:
    """A host loading kanban, office and `extra`, nothing else installed."""
    return open_host(url, [*BUILTIN, *extra], features=Features(office=office))


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def files(tmp_path: Path) -> Path:
    path = tmp_path / "files"
    path.mkdir()
    return path


@pytest.fixture
def gated_host(db_url: str, gate: Gate) -> Iterator[Host]:
    with open_with(db_url, ("gate", gate)) as host:
        yield host


def markers_at(host: Host, task: Task) -> list[Marker]:
    """The markers of the task's newest entry at the step it stands at, in position order."""
    found = [
        (e, m) for e, m in host.entries.list(task=task.id) if e.step_id == task.workflow_step_id
    ]
    assert found, f"no entry for task {task.id} at its step"
    return sorted(found[-1][1], key=lambda m: m.position)


def states(markers: list[Marker]) -> list[tuple[str, str, str | None]]:
    return [(m.kind, m.state, m.reason) for m in markers]


def problems(records: list[LogRecord]) -> list[LogRecord]:
    return [r for r in records if r["level"] in ("WARNING", "ERROR", "CRITICAL")]


def run_in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, errors
