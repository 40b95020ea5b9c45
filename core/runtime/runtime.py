"""The agent runtime: runs agent turns as subprocesses and handles how they end.

A turn ends in one of three ways. Exit 0 ends the turn: the session waits for input, the
task's on_turn_complete fires (when the task still stands where the turn began), and queued
messages are delivered, in order, as further turns. Exit 75 is transient: retried with backoff
until the attempts run out (route R4), a retry cannot start (R5) or the user cancels (R6).
Anything else is a terminal failure (R1); a command that cannot start is R2, missing
credentials R3.

Terminal-failure handling runs under the session's guard, in the order the agent-error spec
fixes: session state -> task review state -> pending step-completion reconciliation -> cleanup
launched (not awaited). The guard is then released and the on_agent_error dispatch runs,
synchronously on the same thread, so an action that needs the guard again (auto_start_agent)
finds it free instead of deadlocking.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs

from core import ids, runs
from core.errors import LanewayError, RunFenced
from core.logs import logger
from core.model import ACTIVE_SESSION_STATES, AgentProfile, Session, Task
from core.runtime import process
from core.runtime.acp.bounds import item
from core.runtime.acp.values import PermissionRequest, TranscriptItem, TurnEnd
from core.runtime.agent_env import agent_env
from core.runtime.desired import desired, exec_env, with_plan_instruction
from core.runtime.failures import AgentFailure
from core.runtime.item_queue import ItemQueue
from core.services.peers import Peers
from core.services.sessions import open_session, sessions_of
from core.services.worktrees import workspace_for

if TYPE_CHECKING:
    from core.runtime.acp.facade import McpServer
    from core.runtime.conversation import Conversations
    from core.runtime.tools.broker import ToolBroker

DEFAULT_RETRY_DELAYS = (5.0, 10.0, 20.0, 40.0, 60.0)
CANCEL_POLL_S = 0.2
WATCH_POLL_S = 0.25
"""How often an exec turn's deadlines are looked at."""
RESEND_CANCEL_S = 2.0
"""A stop request is said to a turn again this often until it ends (the ACP agent may have
been between `session/new` and `session/prompt` when it first came)."""
STOPS: Final = ("cancel", "shutdown", "fenced", "db_away")
"""Why laneway stops a turn: the run was cancelled, or its worker is stopping (the run goes
back to the queue), or its worker lost the liveness lock it claimed the run under (another
worker may run it now: nothing of this turn's is written any more), or the database went away
during the turn (the run goes back to the queue when it is back)."""


def retry_delays_from_env() -> tuple[float, ...]:
    """`LANEWAY_RETRY_DELAYS=0.01,0.01` (seconds, one per retry) overrides the default."""
    raw = os.environ.get("LANEWAY_RETRY_DELAYS")
    if not raw:
        return DEFAULT_RETRY_DELAYS
    return tuple(float(part) for part in raw.split(",") if part.strip())


@attrs.frozen
class TurnOutcome:
    """How a launched turn ended, for the caller (the worker finishing a run)."""

    session_id: str
    ok: bool
    error: str | None = None
    route: str | None = None
    cancelled: bool = False
    """laneway stopped the turn (`session/cancel`); no on_agent_error ran."""
    stopped: str | None = None
    """Why it was stopped (one of `STOPS`) when `cancelled`."""
    messages_waiting: bool = True
    """False when the turn's end saw no message queued for the session, in the transaction
    that set it waiting for input: a message sent after that commit finds it waiting and
    queues a run of its own (`SessionService.send`), so there is nothing to deliver here."""


_UNSET: Final = object()


@attrs.frozen
class BoardRecord:
    """Where a turn's transcript items, reported agent state and usage go: the board."""

    peers: Peers
    task_id: str
    session_id: str
    run_id: str | None
    on_refused: Callable[[str], None] | None = None
    """Told the reason when the board refuses the run's transcript (core.runs.fence)."""

    def items(self, items: Sequence[TranscriptItem]) -> None:
        if items:
            try:
                self.peers.sessions.append_items(
                    self.session_id,
                    [(i.kind, i.text, dict(i.data)) for i in items],
                    run_id=self.run_id,
                )
            except RunFenced as exc:
                if self.on_refused is not None:
                    self.on_refused(exc.reason)

    def agent(self, **fields: Any) -> None:
        self.peers.sessions.record_agent(self.session_id, **fields)

    def usage(self, usage: Mapping[str, Any]) -> None:
        if self.run_id is not None:
            self.peers.runs.record_usage(self.run_id, usage)

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


@attrs.define(eq=False)
class _Turn:
    """What the runtime knows about a turn in flight."""

    task_id: str
    step_id: str | None
    run_id: str | None
    agent_profile_id: str | None
    proc: process.AgentProcess | None = None
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


class RuntimePeers(Peers, Protocol):
    """What the worker and the runtime's arrival step are handed: the services' peers and the
    agent runtime (which the services, a layer below, never call)."""

    @property
    def runtime(self) -> AgentRuntime: ...


class AgentRuntime:
    def __init__(self, peers: Peers, retry_delays: tuple[float, ...] | None = None) -> None:
        self.peers = peers
        self.retry_delays = retry_delays if retry_delays is not None else retry_delays_from_env()
        self._guards: dict[str, tuple[threading.Lock, int]] = {}
        """Per session in use: its lock and how many hold or wait for it."""
        self._guards_lock = threading.Lock()
        self._turns: dict[str, _Turn] = {}
        self._conversations: Conversations | None = None
        self._broker: ToolBroker | None = None
        self._tool_tokens: dict[str, str] = {}
        """The tool-server token each live conversation was opened with, by session."""
        self._cannot_start: set[tuple[str, tuple[str, ...]]] = set()
        """(profile id, command) pairs already reported as impossible to start."""
        self._shut_down = False
        """`kill_all` ran: a turn that begins now (its run claimed just before) is stopped
        before it launches anything."""

    # -- the per-session guard ------------------------------------------------------------------

    @contextmanager
    def guard(self, session_id: str) -> Iterator[None]:
        """Held during a session's failure bookkeeping. Not reentrant, on purpose.

        A session's lock lives only while someone holds or waits for it: the last one out
        drops it, so a host that handles a million failures keeps no lock per session."""
        with self._guards_lock:
            lock, users = self._guards.get(session_id, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self._guards[session_id] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guards_lock:
                _lock, users = self._guards[session_id]
                if users <= 1:
                    del self._guards[session_id]
                else:
                    self._guards[session_id] = (lock, users - 1)

    def guard_held(self, session_id: str) -> bool:
        with self._guards_lock:
            held = self._guards.get(session_id)
        return held is not None and held[0].locked()

    # -- turns ------------------------------------------------------------------------------------

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
        while outcome.ok and outcome.messages_waiting:
            message = self.peers.sessions.pop_queued_message(session_id)
            if message is None:
                break
            self.peers.turns.start_internal(session_id)
            outcome = self._one_turn(
                session_id, message, run_id=run_id, reason="user_message", step_id=None
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
    ) -> TurnOutcome:
        host = self.peers
        session, task = known if known is not None else (host.sessions.get(session_id), None)
        if task is None or task.id != session.task_id:
            task = host.tasks.get(session.task_id)
        profile = host.profiles.get(session.agent_profile_id) if session.agent_profile_id else None
        turn = _Turn(task.id, step_id or task.workflow_step_id, run_id, session.agent_profile_id)
        if self._shut_down:
            turn.stopped = "shutdown"
        if session.metadata.get("cancel_retry_requested"):
            host.sessions.record_effect(session_id, cancel_retry_requested=None)
        self._turns[session_id] = turn
        try:
            if profile is None:
                return self.fail_and_dispatch(
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
                return self.fail_and_dispatch(
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
                host, task.id, session_id, run_id, functools.partial(self._refused_once, turn)
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
                    return self.fail_and_dispatch(failure(route, end.message))
                if attempt >= len(self.retry_delays):
                    return self.fail_and_dispatch(
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
                    return self.fail_and_dispatch(
                        failure("R6", "the user cancelled the retries", user_initiated=True)
                    )
        finally:
            self._turns.pop(session_id, None)

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
        turn: _Turn,
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

        The session is RUNNING from here: an ACP turn sets it first; an exec turn sets it in
        the transaction that keeps its prompt (one transaction for both, once its workspace is
        ready), or before it reports why it could not begin."""
        sessions = self.peers.sessions
        exec_turn = profile.protocol != "acp"
        if not exec_turn:
            sessions.set_state(session_id, "RUNNING")
        try:
            cwd = workspace_for(self.peers, turn.task_id, known[1] if known else None)
        except LanewayError as exc:
            if exec_turn:
                sessions.set_state(session_id, "RUNNING")
            return TurnEnd("failed", str(exc), route="R2")
        # set_state(RUNNING) changes its state only, which nothing here reads
        session = known[0] if known is not None else sessions.get(session_id)
        want = desired(session.metadata, profile.name)
        if turn.stopped is not None:
            if exec_turn:
                sessions.set_state(session_id, "RUNNING")
            return TurnEnd("cancelled", "the turn was cancelled")
        if not exec_turn:
            from core.runtime.conversation import AcpTurn, run_acp_turn

            servers, token = self.tool_servers(turn, session_id)
            try:
                with self.peers.store.agent_turn():
                    return run_acp_turn(
                        self.conversations,
                        AcpTurn(
                            session_id, profile, env, prompt, cwd, want, session.agent, servers
                        ),
                        record,
                    )
            finally:
                # between turns the agent's tools act for no run at all
                self.broker.revoke(token)
        fresh = want.resets > int(session.agent.get("resets_applied") or 0)
        if want.plan_mode:
            prompt = with_plan_instruction(prompt)
        with self.peers.store.transaction():
            sessions.set_state(session_id, "RUNNING")
            record.items([item("prompt", prompt)])
        watch = _Deadlines(turn, profile.turn_timeout, profile.idle_timeout)
        said = ItemQueue(record.items)

        def message(m: Any) -> None:
            watch.heard()
            self._on_message(turn, session_id, m, record, said)

        def line(text: str) -> None:
            watch.heard()
            said.put([item("output", text)])

        with self.peers.store.agent_turn():  # the board is followed while it works
            try:
                turn.proc = process.start(
                    profile.command,
                    prompt=prompt,
                    env={**env, **exec_env(want, fresh=fresh)},
                    execution_id=execution_id,
                    on_message=message,
                    on_line=line,
                    cwd=cwd,
                )
            except process.LaunchError as exc:
                said.stop()
                return TurnEnd("failed", str(exc), route="R2")
            except BaseException:
                said.stop()
                raise
            if turn.stopped is not None:  # stopped while it was starting
                turn.proc.kill()
            watch.start()
            try:
                result = turn.proc.wait()
                said.close()  # everything it said is kept before its turn ends
            except BaseException:
                # the board could not take what it said (its task deleted under it): the agent
                # must not outlive its turn
                turn.proc.kill()
                said.stop()
                with contextlib.suppress(Exception):
                    turn.proc.popen.wait(timeout=5)
                raise
            finally:
                watch.stop()
        if turn.stopped == "fenced":
            return TurnEnd("cancelled", "the worker lost the run's claim")
        self.peers.sessions.append_transcript(session_id, result.transcript)
        reported = {
            "protocol": "exec",
            "mode": want.mode,
            "plan_mode": want.plan_mode,
            "model": want.model,
            "config_options": [{"id": k, "current": v} for k, v in want.options.items()],
            "resets_applied": want.resets,
        }
        if any(session.agent.get(k, _UNSET) != v for k, v in reported.items()):
            # a session's every turn reports the same: written when it changes, not per turn
            if result.ok:
                turn.report = reported  # in the turn end's transaction (`_end_turn`)
            else:
                record.agent(**reported)
        if result.ok:
            return TurnEnd("ok")
        tail = result.stderr_tail.strip()
        if turn.stopped is None and turn.timed_out is not None:
            return TurnEnd("failed", turn.timed_out, route="R1", stderr_tail=tail)
        if result.transient:
            return TurnEnd("transient", result.error_message(), route="R4", stderr_tail=tail)
        return TurnEnd("failed", result.error_message(), route="R1", stderr_tail=tail)

    @property
    def conversations(self) -> Conversations:
        """The ACP agents this process keeps between turns (the ACP SDK loads on first use)."""
        if self._conversations is None:
            from core.runtime.acp.facade import shared_loop
            from core.runtime.conversation import Conversations

            self._conversations = Conversations(shared_loop)
        return self._conversations

    @property
    def broker(self) -> ToolBroker:
        """This process's tool broker: what the `laneway` tool servers of its agents call."""
        if self._broker is None:
            from core.runtime.tools.broker import ToolBroker

            # a run's tool calls are answered only from its own agent's process tree
            self._broker = ToolBroker(
                self.peers, owner=lambda grant: self._running_agent(grant.session_id)
            )
        return self._broker

    def _running_agent(self, session_id: str | None) -> int | None:
        """The pid of the ACP agent running `session_id`'s turn now."""
        if session_id is None or self._conversations is None:
            return None
        return self._conversations.running_group(session_id)

    def tool_servers(self, turn: _Turn, session_id: str) -> tuple[Sequence[McpServer], str]:
        """The MCP servers an ACP session is opened (or loaded) with, the `laneway` tool server
        granted to this turn's run, and the grant's token (revoked when the turn ends)."""
        from core.runtime.tools.broker import mcp_server

        grant = self.broker.grant(
            task_id=turn.task_id,
            step_id=turn.step_id,
            run_id=turn.run_id,
            session_id=session_id,
            agent_profile_id=turn.agent_profile_id,
            token=self._tool_tokens.get(session_id),
        )
        self._tool_tokens[session_id] = grant.token
        return (mcp_server(grant),), grant.token

    def _cancelled_during(self, turn: _Turn, session_id: str, delay: float) -> bool:
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

    def kill_all(self) -> None:
        """Shutdown: end every agent process, and every retry loop (it launches nothing more).
        Their turns end cancelled (`shutdown`): the runs go back to the queue, for they are
        not the agents' failures."""
        self._shut_down = True
        for turn in list(self._turns.values()):
            turn.stopped = turn.stopped or "shutdown"
            turn.cancel.set()
            if turn.proc is not None:
                turn.proc.kill()
        if self._conversations is not None:
            self._conversations.close_all()

    def stop_run(self, run_id: str, why: str = "cancel") -> bool:
        """Stop the turn working on `run_id` in this process: an exec agent's process group is
        killed, an ACP agent gets `session/cancel` (its group killed 10 s later if it goes on;
        at once when `why` is `fenced`).
        Called again while the turn lasts, it says so again every `RESEND_CANCEL_S`. False
        when no turn of that run is in flight here (yet)."""
        turn = next((t for t in list(self._turns.values()) if t.run_id == run_id), None)
        if turn is None:
            return False
        session_id = next((s for s, t in list(self._turns.items()) if t is turn), None)
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
        elif self._conversations is not None and session_id is not None:
            # A fenced run may be another worker's any moment: its agent is told and then
            # killed at once, without the grace a person's cancel gives it to end the turn.
            self._conversations.cancel(session_id, grace=0.0 if why == "fenced" else None)
        return True

    def stop_fenced(self, epoch: str) -> list[str]:
        """This process's liveness lock `epoch` is lost: every turn of a run it claimed is
        stopped at once (an ACP agent gets `session/cancel`, its process group killed), for
        another worker may take the run the moment others find the epoch dead. The runs'
        ids."""
        stopped = [t.run_id for t in list(self._turns.values()) if t.run_id is not None]
        for run_id in stopped:
            self.stop_run(run_id, "fenced")
        if stopped:
            logger.bind(epoch=epoch, runs=stopped).warning(
                "liveness lock lost: stopping the agents of the runs claimed under it"
            )
        return stopped

    def fenced_groups(self) -> list[int]:
        """The process groups of the agents still alive whose turns were stopped because their
        run's claim was lost: after a pause of this worker (core.runtime.watchdog) they are
        killed while still stopped, where an ACP agent would otherwise run on through the grace
        of its `session/cancel`."""
        groups = []
        for session_id, turn in list(self._turns.items()):
            if turn.stopped != "fenced":
                continue
            if turn.proc is not None:
                if turn.proc.popen.returncode is None:
                    groups.append(turn.proc.popen.pid)
            elif self._conversations is not None:
                group = self._conversations.running_group(session_id)
                if group is not None:
                    groups.append(group)
        return groups

    def close(self) -> None:
        """The worker is done: the conversations it kept end (their agents' process groups)."""
        if self._conversations is not None:
            self._conversations.close_all()
        if self._broker is not None:
            self._broker.close()
            self._broker = None
            self._tool_tokens.clear()

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

    def _refused_once(self, turn: _Turn, reason: str) -> None:
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
        if session_id in self._turns:
            return True
        store = self.peers.store
        with store.read() as conn:
            epochs = runs.claimed_for_session(conn, session_id)
            return any(not store.liveness.is_dead(e, conn) for e in epochs)

    def cancel_retry(self, session_id: str) -> bool:
        """The user cancels a transient retry loop (route R6). False: no loop is waiting."""
        turn = self._turns.get(session_id)
        if turn is None:
            return False
        turn.cancel.set()
        return True

    def _on_message(
        self, turn: _Turn, session_id: str, message: Any, record: BoardRecord, said: ItemQueue
    ) -> None:
        host = self.peers
        log = logger.bind(task_id=turn.task_id, session_id=session_id, run_id=turn.run_id)
        if "log" in message:
            log.bind(agent_log=str(message["log"])).info("agent says")
            from core.store import events  # the store is loaded by then; the runtime starts light

            events.notify(
                host.store,
                "agent.output",
                turn.task_id,
                run_id=turn.run_id,
                session_id=session_id,
                text=str(message["log"]),
            )
            said.put([item("log", str(message["log"]))])
        if message.keys() - {"log"}:
            said.flush()  # what it said before a decision or a signal is on the board first
        usage = message.get("usage")
        if isinstance(usage, Mapping):
            record.usage(_exec_usage(usage))
        if message.get("step_complete") and turn.step_id:
            refused = self.fenced(turn.run_id)
            if refused is not None:
                self.refused(turn.run_id, refused, "step signal")
            else:
                host.sessions.record_effect(session_id, pending_step_signal=turn.step_id)
        verdict = message.get("decision")
        if verdict:
            try:
                host.decisions.record_for_agent(
                    turn.task_id,
                    turn.step_id,
                    turn.agent_profile_id,
                    str(verdict),
                    comment=str(message.get("comment", "")),
                    run_id=turn.run_id,
                )
            except RunFenced as exc:
                self.refused(turn.run_id, exc.reason, "decision")
            except LanewayError as exc:
                log.bind(cause=str(exc)).warning("agent decision not recorded")

    def _stopped(self, turn: _Turn, session_id: str, message: str | None) -> TurnOutcome:
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

    def _end_turn(self, turn: _Turn, session_id: str) -> bool:
        """Exit 0: the session waits for input and on_turn_complete fires, unless the task has
        moved on since the turn began (another agent's decision moved it) or the step needs
        an explicit completion signal the agent did not give. False when no message was
        queued for the session as it was set waiting (`TurnOutcome.messages_waiting`)."""
        host = self.peers
        # one transaction: the fence holds the run's row while the session's state is written,
        # and the task and session are read on its connection (no reads of their own)
        with host.store.transaction():
            reported = None
            if turn.report is not None:
                reported = host.sessions.record_agent(session_id, **turn.report)
            refused = self.fenced(turn.run_id)
            if refused == "claim_lost":
                return True  # another worker has the run and the session now: nothing is ours
            host.sessions.set_state(session_id, "WAITING_FOR_INPUT")
            if refused is None:
                task = host.tasks.get(turn.task_id)
                # only its metadata is read below: the row record_agent wrote holds it as it
                # is, the row being this transaction's since (locked, or SQLite's one writer)
                session = reported if reported is not None else host.sessions.get(session_id)
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

    # -- terminal failure --------------------------------------------------------------------------

    def fail_and_dispatch(self, failure: AgentFailure) -> TurnOutcome:
        """Bookkeeping under the session guard, then the dispatch with the guard released."""
        dispatch = self.handle_failure(failure)
        dispatch()
        return TurnOutcome(
            failure.session_id or "", ok=False, error=failure.error_message, route=failure.route
        )

    def handle_failure(self, failure: AgentFailure) -> Callable[[], bool]:
        """The failure bookkeeping. Returns the dispatch for the caller to run once it has
        released the guard; it answers whether on_agent_error was dispatched (a sessionless
        failure has no guard and dispatches nothing)."""
        if not failure.session_id:
            return lambda: False
        refused = self.fenced(failure.run_id)
        if refused == "claim_lost":
            # the run is another worker's now: its failure is not this process's to handle
            logger.bind(task_id=failure.task_id, run_id=failure.run_id, reason=refused).warning(
                "agent failure not handled: the run's claim was taken from this process"
            )
            return lambda: False
        with self.guard(failure.session_id):
            self._bookkeeping(failure)
        return lambda: self._dispatch(failure)

    def _bookkeeping(self, failure: AgentFailure) -> None:
        host = self.peers
        assert failure.session_id is not None
        try:
            task = host.tasks.get(failure.task_id)
        except LanewayError:
            task = None
        office = task is not None and host.tasks.owner(task) is not None
        # 1. session state: Office sessions fail; a kanban session stays recoverable
        host.sessions.set_state(
            failure.session_id,
            "FAILED" if office else "WAITING_FOR_INPUT",
            error=failure.error_message or "agent failed",
        )
        host.sessions.record_effect(
            failure.session_id,
            last_agent_error={
                "message": failure.error_message or "agent failed",
                "route": failure.route,
            },
        )
        # 2. review state: a kanban task goes to REVIEW for a human to look at
        if task is not None and not office and not failure.user_initiated:
            host.tasks.set_state(task.id, "REVIEW")
        # 3. a completion signal the agent gave before failing is honoured first
        session = host.sessions.get(failure.session_id)
        signal = session.metadata.get("pending_step_signal")
        if task is not None and signal and signal == task.workflow_step_id:
            host.sessions.record_effect(failure.session_id, pending_step_signal=None)
            _reconcile_signal(host, task.id, failure)
        # 4. cleanup, launched and not awaited
        turn = self._turns.get(failure.session_id)
        if turn is not None and turn.proc is not None:
            threading.Thread(target=turn.proc.kill, daemon=True).start()

    def _dispatch(self, failure: AgentFailure) -> bool:
        from core import agent_error

        dispatched = False

        def core_dispatch() -> None:
            nonlocal dispatched
            dispatched = agent_error.dispatch(self.peers, failure)

        # Each in its own guard: a failing dispatch never keeps plugins from observing.
        for step in (
            core_dispatch,
            lambda: self.peers.bundle.registry.hooks.agent_failed(self.peers, failure),
        ):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - a failing callback must not take the host down
                logger.bind(
                    task_id=failure.task_id,
                    session_id=failure.session_id,
                    cause=f"{type(exc).__name__}: {exc}",
                ).opt(exception=exc).error("on_agent_error dispatch raised; recovered")
        return dispatched


class _Deadlines:
    """An exec turn's `--turn-timeout` and `--idle-timeout` (no stdout line for that long):
    when one passes, the agent's process group is killed and the turn fails (R1) with
    AGENTS.md's message."""

    def __init__(self, turn: _Turn, turn_timeout: float, idle_timeout: float) -> None:
        self._turn = turn
        self._turn_timeout = turn_timeout
        self._idle_timeout = idle_timeout
        self._began = self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="laneway-deadline", daemon=True)

    def heard(self) -> None:
        self._last = time.monotonic()

    def start(self) -> None:
        self._began = self._last = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        poll = min(WATCH_POLL_S, self._turn_timeout, self._idle_timeout)
        while not self._stop.wait(poll):
            now = time.monotonic()
            if now - self._began > self._turn_timeout:
                message, limit = f"turn timed out after {self._turn_timeout:g} s", "turn_timeout"
            elif now - self._last > self._idle_timeout:
                message, limit = f"agent silent for {self._idle_timeout:g} s", "idle_timeout"
            else:
                continue
            turn = self._turn
            turn.timed_out = message
            logger.bind(task_id=turn.task_id, run_id=turn.run_id, limit=limit).warning(
                f"{message}; killing the agent"
            )
            if turn.proc is not None:
                turn.proc.kill()
            return


def _exec_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """An exec agent's `{"usage": {...}}` line: the numbers it names, nothing else."""
    found: dict[str, Any] = {}
    for key in ("cost_usd", "input_tokens", "output_tokens"):
        value = usage.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            found[key] = value
    return found


def _reconcile_signal(host: Peers, task_id: str, failure: AgentFailure) -> None:
    """Apply the completion signal the agent gave before failing. A failure applying it (a
    move_to_next from the last step, an entry record that could not be written) is logged and
    swallowed: the cleanup and the on_agent_error dispatch still run (AC-A1, AC-A3)."""
    try:
        # an action failing returns a failed result the engine has already logged
        host.engine.handle_trigger(task_id, "on_turn_complete", session_id=failure.session_id)
    except Exception as exc:  # noqa: BLE001 - the failure's own handling must go on
        logger.bind(
            task_id=task_id,
            session_id=failure.session_id,
            route=failure.route,
            cause=f"{type(exc).__name__}: {exc}",
        ).error("the agent's completion signal could not be applied; handling the failure anyway")


def profile_session(host: Peers, task: Task, agent_profile_id: str) -> Session:
    """The task's session for an agent: a non-failed one is reused, else one is started."""
    for session in reversed(sessions_of(host, task.id)):
        if session.agent_profile_id == agent_profile_id and session.state != "FAILED":
            if session.state in ACTIVE_SESSION_STATES:
                return session
            host.sessions.set_state(session.id, "WAITING_FOR_INPUT")
            return host.sessions.get(session.id)
    return open_session(host, task.id, agent_profile_id, external=False)
