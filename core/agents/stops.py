"""Stopping turns and fencing: the turns this process runs, by session, and how laneway stops
them (a person's cancel, a worker stopping, a lost claim, the database away) or refuses what a
run whose claim is lost would write."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any, Final, Protocol

import attrs

from core import runs
from core.agents.ports import AgentPort
from core.logs import logger

RESEND_CANCEL_S = 2.0
"""A stop request is said to a turn again this often until it ends (the ACP agent may have
been between `session/new` and `session/prompt` when it first came)."""
STOPS: Final = ("cancel", "shutdown", "fenced", "db_away")
"""Why laneway stops a turn: the run was cancelled, or its worker is stopping (the run goes
back to the queue), or its worker lost the liveness lock it claimed the run under (another
worker may run it now: nothing of this turn's is written any more), or the database went away
during the turn (the run goes back to the queue when it is back)."""


class AgentProc(Protocol):
    """An exec agent's process, as far as stopping it goes."""

    @property
    def popen(self) -> subprocess.Popen[bytes]: ...

    def kill(self) -> None: ...


class LiveConversations(Protocol):
    """The ACP agents this process keeps between turns, as far as stopping them goes."""

    def running_group(self, session_id: str) -> int | None: ...

    def cancel(self, session_id: str, *, grace: float | None = None) -> bool: ...

    def close_all(self, *, for_good: bool = False) -> None: ...


@attrs.define(eq=False)
class LiveTurn:
    """What the wing knows about a turn in flight."""

    task_id: str
    step_id: str | None
    run_id: str | None
    agent_profile_id: str | None
    proc: AgentProc | None = None
    cancel: threading.Event = attrs.field(factory=threading.Event)
    stopped: str | None = None
    """Set by `stop_run` / `kill_all` (one of `STOPS`): the turn ends cancelled, whatever
    the killed agent's exit looks like."""
    said_at: float = 0.0
    timed_out: str | None = None
    """An exec turn's deadline passed: the failure's message."""
    refused: str | None = None
    """The board refused this turn's transcript (core.runs.fence): why."""
    report: dict[str, Any] | None = None
    """What an exec turn that ended well reports of its agent, written with its end."""


class InFlight:
    """This process's turns in flight, by session, and the stops and fences over them."""

    def __init__(self, peers: AgentPort) -> None:
        self.peers = peers
        self.turns: dict[str, LiveTurn] = {}
        self.conversations: LiveConversations | None = None
        """Set by `adopt` when the first ACP agent starts (the SDK loads then)."""
        self.shut_down = False
        """`kill_all` ran: a turn that begins now (its run claimed just before) is stopped
        before it launches anything."""

    def adopt(self, conversations: LiveConversations) -> None:
        """The ACP conversations, made with the first ACP turn: closed for good at once when
        `kill_all` ran before they existed."""
        self.conversations = conversations
        if self.shut_down:
            conversations.close_all(for_good=True)

    def kill_all(self) -> None:
        """Shutdown: end every agent process, and every retry loop (it launches nothing more).
        Their turns end cancelled (`shutdown`): the runs go back to the queue, for they are
        not the agents' failures."""
        self.shut_down = True
        for turn in list(self.turns.values()):
            turn.stopped = turn.stopped or "shutdown"
            turn.cancel.set()
            if turn.proc is not None:
                turn.proc.kill()
        if self.conversations is not None:
            self.conversations.close_all(for_good=True)

    def stop_run(self, run_id: str, why: str = "cancel") -> bool:
        """Stop the turn working on `run_id` in this process: an exec agent's process group is
        killed, an ACP agent gets `session/cancel` (its group killed 10 s later if it goes on;
        at once when `why` is `fenced`).
        Called again while the turn lasts, it says so again every `RESEND_CANCEL_S`. False
        when no turn of that run is in flight here (yet)."""
        turn = next((t for t in list(self.turns.values()) if t.run_id == run_id), None)
        if turn is None:
            return False
        session_id = next((s for s, t in list(self.turns.items()) if t is turn), None)
        first = turn.stopped is None
        turn.stopped = turn.stopped or why
        turn.cancel.set()
        now = time.monotonic()
        if not first and now - turn.said_at < RESEND_CANCEL_S:
            return True
        turn.said_at = now
        if first:
            logger.bind(task_id=turn.task_id, run_id=run_id, session_id=session_id, why=why).info(
                "stopping the turn"
            )
        if turn.proc is not None:
            turn.proc.kill()
        elif self.conversations is not None and session_id is not None:
            # A fenced run may be another worker's any moment: its agent is told and then
            # killed at once, without the grace a person's cancel gives it to end the turn.
            self.conversations.cancel(session_id, grace=0.0 if why == "fenced" else None)
        return True

    def stop_fenced(self, epoch: str) -> list[str]:
        """This process's liveness lock `epoch` is lost: every turn of a run it claimed is
        stopped at once (an ACP agent gets `session/cancel`, its process group killed), for
        another worker may take the run the moment others find the epoch dead. The runs'
        ids."""
        stopped = [t.run_id for t in list(self.turns.values()) if t.run_id is not None]
        for run_id in stopped:
            self.stop_run(run_id, "fenced")
        if stopped:
            logger.bind(epoch=epoch, runs=stopped).warning(
                "liveness lock lost: stopping the agents of the runs claimed under it"
            )
        return stopped

    def fenced_groups(self) -> list[int]:
        """The process groups of the agents still alive whose turns were stopped because their
        run's claim was lost: after a pause of this worker (core.agents.watchdog) they are
        killed while still stopped, where an ACP agent would otherwise run on through the grace
        of its `session/cancel`."""
        groups = []
        for session_id, turn in list(self.turns.items()):
            if turn.stopped != "fenced":
                continue
            if turn.proc is not None:
                if turn.proc.popen.returncode is None:
                    groups.append(turn.proc.popen.pid)
            elif self.conversations is not None:
                group = self.conversations.running_group(session_id)
                if group is not None:
                    groups.append(group)
        return groups

    def refused(self, run_id: str | None, reason: str, what: str) -> None:
        """A write of run `run_id`'s outcome was refused (`reason`, core.runs.fence): one
        WARNING, and a run whose claim was taken from this process has its agent stopped
        (another worker may be running it)."""
        logger.bind(run_id=run_id, reason=reason, write=what).warning(
            f"run's {what} not recorded: "
            + (
                "its claim was taken from this process"
                if reason == "claim_lost"
                else "the step entry that queued it is superseded"
            )
        )
        if run_id is not None and reason == "claim_lost":
            self.stop_run(run_id, "fenced")

    def refused_once(self, turn: LiveTurn, reason: str) -> None:
        """A turn's transcript refused: told once per turn (its items keep coming until the
        agent stops)."""
        if turn.refused is None:
            turn.refused = reason
            self.refused(turn.run_id, reason, "transcript")

    def fenced(self, run_id: str | None) -> str | None:
        """Why a write run `run_id`'s outcome makes is refused now (`claim_lost`,
        `superseded`; core.runs.fence), or None (also for a turn of no run)."""
        if run_id is None:
            return None
        with self.peers.store.transaction() as uow:
            return runs.fence(uow, run_id, uow.store.liveness.own())

    def turn_in_flight(self, session_id: str) -> bool:
        """Whether a turn of `session_id` is running now, in any process: one of this
        process's, or a run of the session's task and agent claimed by a live epoch (a worker
        elsewhere is working it). Read from the database, never from this process's memory
        alone: a move made by another process must not flip a working agent's session."""
        if session_id in self.turns:
            return True
        store = self.peers.store
        with store.read() as conn:
            epochs = runs.claimed_for_session(conn, session_id)
            return any(not store.liveness.is_dead(e, conn) for e in epochs)

    def cancel_retry(self, session_id: str) -> bool:
        """The user cancels a transient retry loop (route R6). False: no loop is waiting."""
        turn = self.turns.get(session_id)
        if turn is None:
            return False
        turn.cancel.set()
        return True
