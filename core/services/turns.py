from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from core.engine import TriggerResult
from core.services.base import Lazy, Service

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.sessions import SessionService
    from core.services.tasks import TaskService
    from core.services.triggers import TriggerService

STARTING: ContextVar[str | None] = ContextVar("laneway_turn_starting", default=None)
"""The session whose turn is starting on this thread while its on_turn_start runs: an arrival
that trigger causes must not start that agent again (the turn starting is its one turn)."""


class TurnService(Service):
    """Turn boundaries of a task's session: they fire on_turn_start / on_turn_complete."""

    def __init__(
        self,
        peers: Peers,
        *,
        sessions: Lazy[SessionService],
        tasks: Lazy[TaskService],
        triggers: Lazy[TriggerService],
    ) -> None:
        super().__init__(peers)
        self._sessions = sessions
        self._tasks = tasks
        self._triggers = triggers

    def start(self, task: str, session: str | None = None) -> dict[str, Any]:
        self._require_writer()
        task_row = self._tasks().get(task)
        live = self._sessions().resolve(task_row.id, session)
        self._sessions().set_state(live.id, "RUNNING")
        token = STARTING.set(live.id)
        try:
            result: TriggerResult = self.peers.engine.handle_trigger(
                task_row.id, "on_turn_start", session_id=live.id
            )
        finally:
            STARTING.reset(token)
        return result.as_dict(self._tasks().get(task_row.id))

    def start_internal(self, session_id: str) -> None:
        """A turn of a session laneway runs begins: on_turn_start fires for its task."""
        session = self._sessions().get(session_id)
        token = STARTING.set(session_id)
        try:
            self.peers.engine.handle_trigger(
                session.task_id, "on_turn_start", session_id=session_id
            )
        finally:
            STARTING.reset(token)

    def complete(self, task: str, session: str | None = None) -> dict[str, Any]:
        self._require_writer()
        task_row = self._tasks().get(task)
        live = self._sessions().resolve(task_row.id, session)
        self._sessions().set_state(live.id, "WAITING_FOR_INPUT")
        result: TriggerResult = self.peers.engine.handle_trigger(
            task_row.id, "on_turn_complete", session_id=live.id
        )
        if live.external and self._sessions().start_queued_turn(live.id):
            # a message sent while the turn ran starts the next turn now that it ended (unless
            # a `send` that saw the session waiting started it first)
            self.start_internal(live.id)
        if result.transitioned:
            # a task brought to its terminal step may have queued its parent's or the tasks
            # it blocked triggers (core.outbox): delivered now rather than at the next pass
            self._triggers().drain()
        return result.as_dict(self._tasks().get(task_row.id))
