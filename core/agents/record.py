"""Where a turn's transcript items, reported agent state, usage and permission questions go:
the board, through the services."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from core.agents.bounds import item
from core.agents.ports import AgentPort
from core.agents.values import (
    ElicitationAnswer,
    ElicitationRequest,
    PermissionRequest,
    TranscriptItem,
)
from core.errors import LanewayError, RunFenced
from core.logs import logger


@attrs.frozen
class BoardRecord:
    """Where a turn's transcript items, reported agent state and usage go: the board."""

    peers: AgentPort
    task_id: str
    session_id: str
    run_id: str | None
    on_refused: Callable[[str], None] | None = None
    """Told the reason when the board refuses the run's transcript (core.runs.fence)."""
    turn: int = 0
    """Which of its run's turns this is (0: the run's own; 1, 2...: messages queued during it)."""

    def items(self, items: Sequence[TranscriptItem], *, locked: str | None = None) -> None:
        """`locked`: as `SessionService.append_items` has it."""
        if items:
            # The turn's prompt says which turn of the run it is: the board keeps one prompt
            # item per (run, turn), however often the prompt is sent (a transient retry, the
            # run re-queued after its worker died) - issue 41 item 8
            items = [
                TranscriptItem(i.kind, i.text, {**i.data, "turn": self.turn})
                if i.kind == "prompt" and self.run_id is not None
                else i
                for i in items
            ]
            try:
                self.peers.sessions.append_items(
                    self.session_id,
                    items,
                    run_id=self.run_id,
                    locked=locked,
                )
            except RunFenced as exc:
                if self.on_refused is not None:
                    self.on_refused(exc.reason)

    def running(self, items: Sequence[TranscriptItem] = ()) -> None:
        """The session RUNNING and `items` kept, in one transaction (a turn's start with its
        prompt: an exec turn's, a live ACP conversation's)."""
        # no board-version read: neither write depends on the catalogue (as `append_items`
        # has it); the turn's end, which acts on the board, follows it
        with self.peers.store.transaction(follow_board=False):
            # its row written (and locked) here: the items' write does not read it again
            task_id = self.peers.sessions.set_state(self.session_id, "RUNNING")
            self.items(items, locked=task_id)

    def agent(self, **fields: Any) -> None:
        self.peers.sessions.record_agent(self.session_id, **fields)

    def usage(self, usage: Mapping[str, Any]) -> None:
        """Add what the agent reported to the run's usage. A value that is not a finite,
        non-negative number (`Infinity`, `NaN`, `1e999`, `-1`, text) is a WARNING and is not
        added; the rest is, and the turn goes on to its own end (issue 39 item 4)."""
        good = {k: v for k, v in usage.items() if _amount(v)}
        bad = {k: repr(v) for k, v in usage.items() if k not in good}
        if bad:
            self.warning("agent usage not recorded: not a finite, non-negative number", usage=bad)
        if self.run_id is None or not good:
            return
        try:
            self.peers.runs.record_usage(self.run_id, good)
        except LanewayError as exc:  # its run deleted with its task: the turn ends as it will
            self.warning("agent usage not recorded", cause=str(exc))

    def warning(self, message: str, **fields: Any) -> None:
        logger.bind(
            task_id=self.task_id, session_id=self.session_id, run_id=self.run_id, **fields
        ).warning(message)
        self.items([item("log", message, {"level": "warning", **fields})])

    def ask(self, request: PermissionRequest) -> str:
        found = self.peers.permissions.request(
            self.task_id,
            self.session_id,
            run_id=self.run_id,
            tool_call=request.tool_call,
            options=[attrs.asdict(o) for o in request.options],
        )
        logger.bind(
            task_id=self.task_id,
            session_id=self.session_id,
            run_id=self.run_id,
            permission_id=found.id,
        ).info("permission request waits for a person")
        return found.id

    def await_answer(self, permission_id: str, stop: Callable[[], bool]) -> str | None:
        found = self.peers.permissions.wait(permission_id, stop=stop)
        if found.state == "pending":
            # The turn ended first: the question is withdrawn; an answer now would reach no one.
            self.peers.permissions.cancel(permission_id, by="turn_ended")
            return None
        return found.option_id if found.state in ("allowed", "denied") else None

    def question(self, request: ElicitationRequest) -> str:
        found = self.peers.questions.ask(
            self.task_id,
            self.session_id,
            run_id=self.run_id,
            message=request.message,
            fields=request.fields,
        )
        logger.bind(
            task_id=self.task_id,
            session_id=self.session_id,
            run_id=self.run_id,
            question_id=found.id,
        ).info("agent question waits for a person")
        return found.id

    def await_question(self, question_id: str, stop: Callable[[], bool]) -> ElicitationAnswer:
        found = self.peers.questions.wait(question_id, stop=stop)
        if found.state == "pending":
            # The turn ended first: the question is withdrawn; an answer now would reach no one.
            self.peers.questions.cancel(question_id, by="turn_ended")
            return ElicitationAnswer("cancel")
        if found.state == "answered":
            return ElicitationAnswer("accept", dict(found.answer or {}))
        return ElicitationAnswer("decline" if found.state == "declined" else "cancel")


def _amount(value: Any) -> bool:
    """Whether `value` is a usage amount: a finite number, not negative (nor a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )
