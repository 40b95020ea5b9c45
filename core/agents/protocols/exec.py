"""The exec protocol behind the turn protocol: a try at a turn is one subprocess
(`exec_process`), told its prompt on stdin, heard line by line; its JSON lines are messages
(a log line, usage, a decision, a step signal), its exit code the turn's end."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from core.agents.bounds import cut_text, item
from core.agents.desired import exec_env, with_plan_instruction
from core.agents.item_queue import ItemQueue
from core.agents.protocols import exec_process as process
from core.agents.protocols import exec_reactor
from core.agents.stops import InFlight, LiveTurn
from core.agents.values import TranscriptItem, TurnEnd
from core.errors import LanewayError, RunFenced
from core.logs import logger

if TYPE_CHECKING:
    from core.agents.protocols import TurnCall
    from core.agents.record import BoardRecord

WATCH_POLL_S = 0.25
"""How often an exec turn's deadlines are looked at."""
_UNSET: Final = object()


class ExecProtocol:
    def running_first(self, session_id: str) -> bool:
        return False

    def __init__(self, in_flight: InFlight) -> None:
        self.in_flight = in_flight
        self.peers = in_flight.peers

    def attempt(self, turn: LiveTurn, call: TurnCall) -> TurnEnd:
        session_id, session, profile, want, record = (
            call.session_id,
            call.session,
            call.profile,
            call.want,
            call.record,
        )
        fresh = want.resets > int(session.agent.get("resets_applied") or 0)
        prompt = with_plan_instruction(call.prompt) if want.plan_mode else call.prompt
        record.running([item("prompt", prompt)])
        watch = _Deadlines(turn, profile.turn_timeout, profile.idle_timeout)
        said = ItemQueue(record.items)

        def message(m: Any) -> None:
            watch.heard()
            self._on_message(turn, session_id, m, record, said)

        def line(text: str) -> None:
            watch.heard()
            said.put([item("output", text)])

        env = {**call.env, **exec_env(want, fresh=fresh)}
        command = profile.command
        if call.room is not None:
            try:
                command = call.room.wrap(command, env)
            except LanewayError as exc:
                said.stop()
                return TurnEnd("failed", str(exc), route="R2")
            env = call.room.env(env)
        with self.peers.store.agent_turn():  # the board is followed while it works
            try:
                proc = process.start(
                    command,
                    prompt=prompt,
                    env=env,
                    execution_id=call.execution_id,
                    on_message=message,
                    on_line=line,
                    cwd=call.cwd,
                )
            except process.LaunchError as exc:
                said.stop()
                return TurnEnd("failed", str(exc), route="R2")
            except BaseException:
                said.stop()
                raise
            turn.proc = proc
            if turn.stopped is not None:  # stopped while it was starting
                proc.kill()
            watch.start()
            try:
                result = proc.wait()
                if result.unread:
                    said.note(unread_note(turn, session_id, result.unread))
                said.close()  # everything it said is kept before its turn ends
            except BaseException:
                # the board could not take what it said (its task deleted under it): the agent
                # must not outlive its turn
                proc.kill()
                said.stop()
                with contextlib.suppress(Exception):
                    proc.popen.wait(timeout=5)
                raise
            finally:
                watch.stop()
        if turn.stopped == "fenced":
            return TurnEnd("cancelled", "the worker lost the run's claim")
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
                turn.report = reported  # in the turn end's transaction (core.agents.turns)
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

    def _on_message(
        self, turn: LiveTurn, session_id: str, message: Any, record: BoardRecord, said: ItemQueue
    ) -> None:
        host = self.peers

        def log() -> Any:  # bound when a record is made, not per line (issue 45)
            return logger.bind(task_id=turn.task_id, session_id=session_id, run_id=turn.run_id)

        if "log" in message and said.put([item("log", str(message["log"]))]):
            # past the turn's transcript limit a log line is dropped, here too: a million of
            # them are not a million log records
            text = cut_text(str(message["log"]))
            log().bind(agent_log=text).info("agent says")
            from core.store import events  # the store is loaded by then; the runtime starts light

            events.notify(
                host.store,
                "agent.output",
                turn.task_id,
                run_id=turn.run_id,
                session_id=session_id,
                text=text,
            )
        if message.keys() - {"log"}:
            said.flush()  # what it said before a decision or a signal is on the board first
        usage = message.get("usage")
        if isinstance(usage, Mapping):
            record.usage(_exec_usage(usage))
        if message.get("step_complete") and turn.step_id:
            refused = self.in_flight.fenced(turn.run_id)
            if refused is not None:
                self.in_flight.refused(turn.run_id, refused, "step signal")
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
                self.in_flight.refused(turn.run_id, exc.reason, "decision")
            except LanewayError as exc:
                log().bind(cause=str(exc)).warning("agent decision not recorded")


class _Deadlines:
    """An exec turn's `--turn-timeout` and `--idle-timeout` (no stdout line for that long):
    when one passes, the agent's process group is killed and the turn fails (R1) with
    AGENTS.md's message. Looked at every `poll` seconds by the process's one deadline keeper
    (`_Keeper`, a job on the exec reactor's thread), not by a thread handed each turn."""

    def __init__(self, turn: LiveTurn, turn_timeout: float, idle_timeout: float) -> None:
        self._turn = turn
        self._turn_timeout = turn_timeout
        self._idle_timeout = idle_timeout
        self.poll = min(WATCH_POLL_S, turn_timeout, idle_timeout)
        self._began = self._last = time.monotonic()

    def heard(self) -> None:
        self._last = time.monotonic()

    def start(self) -> None:
        self._began = self._last = time.monotonic()
        _keeper.add(self)

    def stop(self) -> None:
        _keeper.remove(self)

    def passed(self, now: float) -> tuple[str, str] | None:
        """The message and the limit of a deadline passed at `now`, or None."""
        if now - self._began > self._turn_timeout:
            return f"turn timed out after {self._turn_timeout:g} s", "turn_timeout"
        if now - self._last > self._idle_timeout:
            return f"agent silent for {self._idle_timeout:g} s", "idle_timeout"
        return None

    def fire(self, message: str, limit: str) -> None:
        turn = self._turn
        turn.timed_out = message
        logger.bind(task_id=turn.task_id, run_id=turn.run_id, limit=limit).warning(
            f"{message}; killing the agent"
        )
        if turn.proc is not None:
            turn.proc.kill()


class _Keeper:
    """The deadlines of every exec turn of the process, looked at by one job on the exec
    reactor's thread (`exec_reactor.later`), armed while any turn is watched: a turn adds its
    deadlines and removes them, each a set operation under a lock, where a thread of its own,
    handed the turn at its start and woken at its end, was two thread switches a turn (issue
    45), and a thread of the keeper's own was one more thread a process. The job comes back
    every shortest `poll` of what is watched (sooner when a shorter one comes), not once per
    turn: a drain of a thousand short runs a second wakes it four times a second."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: set[_Deadlines] = set()
        self._armed: tuple[float, exec_reactor.Timer] | None = None

    def add(self, deadlines: _Deadlines) -> None:
        with self._lock:
            self._watched.add(deadlines)
            self._arm(deadlines.poll)

    def remove(self, deadlines: _Deadlines) -> None:
        """After this returns the turn is never killed for its deadlines: a deadline found
        passed is fired under the same lock."""
        with self._lock:
            self._watched.discard(deadlines)

    def _arm(self, poll: float) -> None:
        """Have the job look in `poll` seconds unless it already will by then. Under `_lock`."""
        when = time.monotonic() + poll
        if self._armed is not None:
            if self._armed[0] <= when:
                return
            self._armed[1].cancel()
        self._armed = (when, exec_reactor.reactor.later(poll, self._look))

    def _look(self) -> None:
        with self._lock:
            self._armed = None
            now = time.monotonic()
            due = [(d, found) for d in self._watched if (found := d.passed(now))]
            for d, (message, limit) in due:
                self._watched.discard(d)  # once: its agent is killed
                d.fire(message, limit)
            if self._watched:
                self._arm(min(d.poll for d in self._watched))


_keeper = _Keeper()
"""Made at import (nothing is armed until a turn adds its deadlines)."""


def _forgotten() -> None:
    """A forked child has none of its parent's threads: its keeper starts anew."""
    global _keeper
    _keeper = _Keeper()


os.register_at_fork(after_in_child=_forgotten)


def unread_note(turn: LiveTurn, session_id: str | None, unread: int) -> TranscriptItem:
    """The item (and the warning) saying a stopped agent's unprocessed output was dropped:
    a stop does not wait for a backlog to be written (core.agents.protocols.exec_pipe)."""
    logger.bind(
        task_id=turn.task_id, session_id=session_id, run_id=turn.run_id, unread_bytes=unread
    ).warning("agent stopped: its output not yet processed was dropped")
    return item(
        "log",
        f"stopped: {unread} bytes the agent wrote were not yet read and are not kept",
        {"level": "warning", "unread_bytes": unread},
    )


def _exec_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """An exec agent's `{"usage": {...}}` line: what it says of the keys laneway counts
    (`BoardRecord.usage` warns of a value that is not a finite, non-negative number)."""
    keys = ("cost_usd", "input_tokens", "output_tokens")
    return {key: usage[key] for key in keys if usage.get(key) is not None}
