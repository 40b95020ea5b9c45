"""A task's history (issue 44 item 3; `task history T`, `GET /api/tasks/{t}/history`): its
events as the event log keeps them (at least 24 hours, `core.store.events.RETENTION`), each
naming its `actor`, oldest first."""

from __future__ import annotations

from typing import Any, Protocol

from core.model import Task
from core.store import events
from core.store.database import Store


class _Tasks(Protocol):
    def get(self, ref: str) -> Task: ...


class _Board(Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def tasks(self) -> _Tasks: ...


def task_history(board: _Board, ref: str) -> list[dict[str, Any]]:
    task = board.tasks.get(ref)
    return [e.as_json() for e in events.read_all(board.store, task_id=task.id)]
