"""A turn and its retries, whatever the protocol, and how it ends.

A turn ends in one of three ways. Exit 0 ends the turn: the session waits for input, the
task's on_turn_complete fires (when the task still stands where the turn began), and queued
messages are delivered, in order, as further turns. Exit 75 is transient: retried with backoff
until the attempts run out (route R4), a retry cannot start (R5) or the user cancels (R6).
Anything else is a terminal failure (R1); a command that cannot start is R2, missing
credentials R3. A terminal failure is the failure room's (core.agents.failure).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping
from typing import Final

from core import ids
from core.agents import sandbox
from core.agents.bounds import item
from core.agents.desired import desired
from core.agents.environment import agent_env
from core.agents.failure import Failures
from core.agents.protocols import TurnCall, TurnProtocol, setup
from core.agents.record import BoardRecord
from core.agents.stops import InFlight, LiveTurn
from core.agents.values import TurnEnd, TurnOutcome
from core.errors import LanewayError
from core.logs import logger
from core.model import AgentFailure, AgentProfile, Session, Task
from core.services import travel
from core.services.worktrees import checkout_for, wanted

DEFAULT_RETRY_DELAYS = (5.0, 10.0, 20.0, 40.0, 60.0)
CANCEL_POLL_S = 0.2


def retry_delays_from_env() -> tuple[float, ...]:
    """`LANEWAY_RETRY_DELAYS=0.01,0.01` (seconds, one per retry) overrides the default."""
    raw = os.environ.get("LANEWAY_RETRY_DELAYS")
    if not raw:
        return DEFAULT_RETRY_DELAYS
    try:
        delays = tuple(float(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise LanewayError(
            f"LANEWAY_RETRY_DELAYS={raw[:80]!r}: expected seconds separated by commas"
        ) from None
    if not all(0 <= d <= MAX_RETRY_DELAY_S for d in delays):
        raise LanewayError(
            f"LANEWAY_RETRY_DELAYS={raw[:80]!r}: each delay from 0 to {MAX_RETRY_DELAY_S:g} s"
        )
    return delays


MAX_RETRY_DELAY_S: Final = 3600.0
"""The longest delay before a turn is tried again that `LANEWAY_RETRY_DELAYS` may give."""


class TurnLoop:
    """Runs a session's turns: one turn's tries by its profile's protocol, then its end."""

    def __init__(
        self,
        in_flight: InFlight,
        failures: Failures,
        protocols: dict[str, TurnProtocol],
        retry_delays: tuple[float, ...],
    ) -> None:
        self.in_flight = in_flight
        self.peers = in_flight.peers
        self.failures = failures
        self.protocols = protocols
        """By profile protocol; `exec` serves every protocol not named."""
        self.retry_delays = retry_delays
        self._cannot_start: set[tuple[str, tuple[str, ...]]] = set()
        """(profile id, command) pairs already reported as impossible to start."""

    def run_turn(
        self,
        session_id: str,
        prompt: str,
        *,
        run_id: str | None = None,
        reason: str = "",
        step_id: str | None = None,
        session: Session | None = None,
        task: Task | None = None,
    ) -> TurnOutcome:
        """Run one agent turn for `session_id` (blocking), then any queued messages.

        :param step_id: the step the turn works on (a run's step); default the task's step.
            Its decisions are recorded there, and its end completes that step only.
        :param session: the session, :param task: its task, when the caller has just read
            them (the worker): the first turn does not read them again.
        """
        outcome = self._one_turn(
            session_id,
            prompt,
            run_id=run_id,
            reason=reason,
            step_id=step_id,
            known=(session, task) if session is not None and session.id == session_id else None,
        )
        ordinal = 0
        while outcome.ok and outcome.messages_waiting:
            message = self.peers.sessions.pop_queued_message(session_id, run_id)
            if message is None:
                break
            self.peers.turns.start_internal(session_id)
            ordinal += 1
            outcome = self._one_turn(
                session_id,
                message,
                run_id=run_id,
                reason="user_message",
                step_id=None,
                ordinal=ordinal,
            )
        return outcome

    def _one_turn(
        self,
        session_id: str,
        prompt: str,
        *,
        run_id: str | None,
        reason: str,
        step_id: str | None,
        known: tuple[Session, Task | None] | None = None,
        ordinal: int = 0,
    ) -> TurnOutcome:
        """One turn; `ordinal` counts the run's turns (its queued messages follow its first),
        so that the turn's prompt is kept once however often it is sent."""
        host = self.peers
        fail = self.failures.fail_and_dispatch
        session, task = known if known is not None else (host.sessions.get(session_id), None)
        if task is None or task.id != session.task_id:
            task = host.tasks.get(session.task_id)
        # as the board's catalogue has it: the run's claim, or the reads above, followed it
        profile = (
            host.profiles.current(session.agent_profile_id) if session.agent_profile_id else None
        )
        turn = LiveTurn(task.id, step_id or task.workflow_step_id, run_id, session.agent_profile_id)
        # Seen before it is asked: a `kill_all` (a signal, in the main thread) between the
        # question and the entry would find neither the flag set nor the turn to stop.
        self.in_flight.turns[session_id] = turn
        try:
            if self.in_flight.shut_down:
                turn.stopped = "shutdown"
            if session.metadata.get("cancel_retry_requested"):
                host.sessions.record_effect(session_id, cancel_retry_requested=None)
            if profile is None:
                return fail(
                    AgentFailure(task.id, session_id, "R2", "the session has no agent profile")
                )
            agent = agent_env(
                profile,
                os.environ,
                {
                    "LANEWAY_TASK_ID": task.id,
                    "LANEWAY_STEP_ID": turn.step_id or "",
                    "LANEWAY_SESSION_ID": session_id,
                    "LANEWAY_RUN_ID": run_id or "",
                    "LANEWAY_REASON": reason,
                },
            )
            missing = agent.missing
            if missing:
                return fail(
                    AgentFailure(
                        task.id,
                        session_id,
                        "R3",
                        f"authentication failed: missing {', '.join(missing)}",
                        agent_profile_id=profile.id,
                        run_id=run_id,
                    )
                )
            record = BoardRecord(
                host,
                task.id,
                session_id,
                run_id,
                functools.partial(self.in_flight.refused_once, turn),
                ordinal,
            )
            attempt = 0
            while True:
                execution_id = ids.new_id()
                end = self._attempt(
                    turn,
                    session_id,
                    profile,
                    agent.env,
                    prompt,
                    record,
                    execution_id,
                    # a retry reads them again: the wait may have changed either
                    known=(session, task) if attempt == 0 else None,
                )

                failure = functools.partial(
                    AgentFailure,
                    task.id,
                    session_id,
                    agent_execution_id=execution_id,
                    agent_profile_id=profile.id,
                    run_id=run_id,
                )
                if end.outcome == "ok":
                    waiting = self._end_turn(turn, session_id)
                    return TurnOutcome(session_id, ok=True, messages_waiting=waiting)
                if turn.stopped is not None or end.outcome == "cancelled":
                    return self._stopped(turn, session_id, end.message)
                if end.stderr_tail:
                    record.items([item("stderr", end.stderr_tail)])
                if end.outcome == "failed":
                    route = "R5" if attempt and end.route == "R2" else end.route or "R1"
                    if end.route == "R2":
                        self._warn_cannot_start(profile, end.message)
                    return fail(failure(route, end.message))
                if attempt >= len(self.retry_delays):
                    return fail(
                        failure(
                            "R4",
                            f"transient failures exhausted {attempt + 1} attempts: {end.message}",
                        )
                    )
                delay = self.retry_delays[attempt] if end.retry_after is None else end.retry_after
                attempt += 1
                logger.bind(
                    task_id=task.id, session_id=session_id, attempt=attempt, delay=delay
                ).warning("transient agent failure; retrying")
                with host.store.agent_turn():  # seconds: the board may move meanwhile
                    cancelled = self._cancelled_during(turn, session_id, delay)
                if cancelled:
                    if turn.stopped is not None:
                        return self._stopped(turn, session_id, "the turn was cancelled")
                    return fail(
                        failure("R6", "the user cancelled the retries", user_initiated=True)
                    )
        finally:
            self.in_flight.turns.pop(session_id, None)

    def _warn_cannot_start(self, profile: AgentProfile, message: str) -> None:
        """One WARNING per profile and command for this process: a worker whose agent cannot
        start fails every run of it alike, and one line says why (each run keeps its error)."""
        key = (profile.id, tuple(profile.command))
        if key in self._cannot_start:
            return
        self._cannot_start.add(key)
        logger.bind(
            agent_profile_id=profile.id, profile=profile.name, command=list(profile.command)
        ).warning(f"agent profile {profile.name!r} cannot start: {message}")

    def _attempt(
        self,
        turn: LiveTurn,
        session_id: str,
        profile: AgentProfile,
        env: Mapping[str, str],
        prompt: str,
        record: BoardRecord,
        execution_id: str,
        known: tuple[Session, Task] | None = None,
    ) -> TurnEnd:
        """One try at the turn, by the profile's protocol; how it ended, routed. `known`: the
        session and task as the turn read them at its start (the first try).

        The session is RUNNING from here: an ACP turn whose agent is still to start sets it
        first; an exec turn, and a live ACP conversation's, sets it in the transaction that
        keeps its prompt (one transaction for both, once its workspace is ready), or before it
        reports why it could not begin."""
        sessions = self.peers.sessions
        protocol = self.protocols.get(profile.protocol) or self.protocols["exec"]
        first = protocol.running_first(session_id)
        if first:
            sessions.set_state(session_id, "RUNNING")
        try:
            cwd, repo = checkout_for(self.peers, turn.task_id, known[1] if known else None)
            if repo is None and profile.sandbox == "bwrap":
                cwd = sandbox.own_room(turn.task_id)
            room = sandbox.room(profile, cwd, turn.task_id, self.peers.store.url, repo=repo)
        except LanewayError as exc:
            if not first:
                sessions.set_state(session_id, "RUNNING")
            return TurnEnd("failed", str(exc), route="R2")
        task = known[1] if known is not None else self.peers.tasks.get(turn.task_id)
        command = None
        if task.workflow_id and wanted(self.peers, task)[0] is not None:  # a worktree's turn
            command = self.peers.workflows.by_id(task.workflow_id).setup
        if setup.pending(cwd, command) and turn.stopped is None:
            assert command is not None
            if not first:
                sessions.set_state(session_id, "RUNNING")
                first = True  # the protocol's try finds it RUNNING
            ended = setup.run(
                turn,
                command,
                profile=profile,
                cwd=cwd,
                env=env,
                room=room,
                record=record,
                # its own mark: the sweep after it must not reach the agent's processes
                execution_id=ids.new_id(),
            )
            if ended is not None:
                return ended
        # set_state(RUNNING) changes its state only, which nothing here reads
        session = known[0] if known is not None else sessions.get(session_id)
        want = desired(session.metadata, profile.name)
        if turn.stopped is not None:
            if not first:
                sessions.set_state(session_id, "RUNNING")
            return TurnEnd("cancelled", "the turn was cancelled")
        call = TurnCall(
            session_id, session, profile, env, prompt, cwd, want, record, execution_id, room, first
        )
        end = protocol.attempt(turn, call)
        if turn.stopped != "fenced":
            # before the turn's end is routed (which may queue the next run, for any host):
            # its branch is on the remote first (a workflow with one; core.services.travel)
            travel.carry(self.peers, turn.task_id, known[1] if known else None)
        return end

    def _cancelled_during(self, turn: LiveTurn, session_id: str, delay: float) -> bool:
        """Wait out a retry delay; True when the user cancels meanwhile, in this process
        (`cancel_retry`) or from another one (the session's `cancel_retry_requested`)."""
        deadline = time.monotonic() + delay
        while True:
            remaining = deadline - time.monotonic()
            if turn.cancel.wait(max(0.0, min(remaining, CANCEL_POLL_S))):
                return True
            session = self.peers.sessions.get(session_id)
            if session.metadata.get("cancel_retry_requested"):
                self.peers.sessions.record_effect(session_id, cancel_retry_requested=None)
                return True
            if remaining <= 0:
                return False

    def _stopped(self, turn: LiveTurn, session_id: str, message: str | None) -> TurnOutcome:
        """laneway stopped the turn: no failure, no on_agent_error; the session waits for
        input, and what the agent said so far stays in its transcript. The session may be
        gone with its task (a deleted task's runs are stopped). A fenced turn writes nothing:
        its session is another worker's now."""
        try:
            if turn.stopped != "fenced":
                self.peers.sessions.set_state(session_id, "WAITING_FOR_INPUT")
        except LanewayError as exc:
            logger.bind(session_id=session_id, cause=str(exc)).info("stopped turn's session gone")
        return TurnOutcome(
            session_id,
            ok=False,
            error=message or "the turn was cancelled",
            cancelled=True,
            stopped=turn.stopped or "cancel",
        )

    def _end_turn(self, turn: LiveTurn, session_id: str) -> bool:
        """Exit 0: the session waits for input and on_turn_complete fires, unless the task has
        moved on since the turn began (another agent's decision moved it) or the step needs
        an explicit completion signal the agent did not give. False when no message was
        queued for the session as it was set waiting (`TurnOutcome.messages_waiting`)."""
        host = self.peers
        # one transaction: the fence holds the run's row while the session's state is written,
        # and the task and session are read on its connection (no reads of their own)
        with host.store.transaction():
            if turn.report is not None:
                host.sessions.record_agent(session_id, **turn.report)
            refused = self.in_flight.fenced(turn.run_id)
            if refused == "claim_lost":
                # another worker has the run and the session now: nothing is ours, the
                # messages queued for the session included (that worker delivers them)
                return False
            # the row as its state was written (only its metadata is read below): not read
            # again, the row being this transaction's since (locked, or SQLite's one writer)
            written = host.sessions.set_waiting(session_id)
            if refused is None:
                task = host.tasks.get(turn.task_id)
                session = written if written is not None else host.sessions.get(session_id)
        if refused is not None:
            logger.bind(task_id=turn.task_id, run_id=turn.run_id, reason=refused).warning(
                "turn's outcome not applied: the step entry that queued its run is superseded"
            )
            return True
        waiting = bool(session.metadata.get("queued_messages"))
        if task.workflow_step_id is None or task.workflow_step_id != turn.step_id:
            return waiting
        signalled = session.metadata.get("pending_step_signal") == task.workflow_step_id
        _wf, step = host.workflows.step_by_id(task.workflow_step_id)
        if step.auto_advance_requires_signal and not signalled:
            return waiting
        if signalled:
            host.sessions.record_effect(session_id, pending_step_signal=None)
        # the task as the turn end's transaction read it: not read again
        host.engine.handle_trigger(task.id, "on_turn_complete", session_id=session_id, task=task)
        return waiting
