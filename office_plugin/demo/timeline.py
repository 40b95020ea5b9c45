"""The demo's timeline, read from the board's events (`laneway_event`), never from logs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import attrs

from office_plugin.demo.board import Board
from plugins.api import Run
from plugins.app import Event as BoardEvent
from plugins.app import parse_time

if TYPE_CHECKING:
    from plugins.app import Host

Event = dict[str, Any]
OnEvent = Callable[[Event], None]


_SETTLED: Final = frozenset({"done", "failed"})
"""Entry markers that end an action the timeline shows (skipped ones ran nothing)."""


@attrs.frozen
class _Pending:
    when: datetime
    order: int
    event: Event


@attrs.define
class _Entry:
    """An arrival's entry, as its events describe it."""

    step_id: str
    queued_since_marker: int = 0


class Timeline:
    """Collects the walk's board events; `flush` turns what arrived into timeline events.

    Subscribed to the host's events for the walk's length (`Host.subscribe`): `laneway_event`
    runs on whichever thread committed (the worker runs agents on a pool), so it only stores
    the event; `flush`, called on the worker's own thread after each run, reads names through
    the host's services and emits the events in commit order.
    """

    def __init__(self, host: Host, board: Board, on_event: OnEvent | None) -> None:
        self.host = host
        self.board = board
        self.on_event = on_event
        self.started = datetime.now(UTC)
        self.events: list[Event] = []
        self._received: list[BoardEvent] = []
        self._pending: list[_Pending] = []
        self._lock = threading.Lock()
        self._order = 0
        self._runs: dict[str, Run] = {}
        self._entries: dict[str, _Entry] = {}
        self._entry_seq: dict[str, int] = {}
        self._decided: dict[str, int] = {}
        """Step id -> decisions standing there (what clear_decisions removes)."""
        self._queued_reasons: list[str] = []
        """Reasons of the runs queued since the last on_agent_error dispatch."""

    def laneway_event(self, event: BoardEvent) -> None:
        if event.task_id != self.board.task_id:
            return
        with self._lock:
            self._received.append(event)

    def add(self, when: datetime, event: Event) -> None:
        with self._lock:
            self._order += 1
            self._pending.append(_Pending(when, self._order, event))

    def flush(self) -> None:
        """Turn what arrived since the last flush into timeline events and emit them."""
        with self._lock:
            received, self._received = self._received, []
        for board_event in received:
            for event in self._convert(board_event):
                self.add(parse_time(board_event.at), event)
        with self._lock:
            batch, self._pending = self._pending, []
        for item in _failures_where_they_happened(batch):
            self._emit(item)

    def _emit(self, item: _Pending) -> None:
        event = item.event
        if event["event"] == "arrival" and event.get("entry_seq") is not None:
            self._entry_seq[event["step"]] = int(event["entry_seq"])
        if event["event"] == "decision":
            event["entry_seq"] = self._entry_seq.get(event["step"])
        seconds = max(0.0, (item.when - self.started).total_seconds())
        # events read in commit order: one recorded early in a transaction that committed
        # late shows when it became visible, never before what precedes it
        if self.events:
            seconds = max(seconds, float(self.events[-1]["at"]))
        shaped = {"at": round(seconds, 3), **event}
        self.events.append(shaped)
        if self.on_event is not None:
            self.on_event(shaped)

    # -- board events -> timeline events

    def _run(self, run_id: str) -> Run | None:
        run = self._runs.get(run_id)
        if run is None:
            run = self.host.runs.get(run_id)
            if run is not None:
                self._runs[run_id] = run
        return run

    def _run_fields(self, data: Mapping[str, Any]) -> dict[str, Any]:
        run = self._run(str(data.get("run_id")))
        return {
            "run_id": data.get("run_id"),
            "agent": self.board.agent_name(data.get("agent_profile_id"))
            or (self.board.agent_name(run.agent_profile_id) if run else None),
            "reason": data.get("reason") or (run.reason if run else None),
            "step": self.board.step_name(run.workflow_step_id) if run else None,
        }

    def _convert(self, event: BoardEvent) -> list[Event]:
        data = event.data
        kind = event.type
        if kind == "task.moved":
            return self._moved(data)
        if kind == "entry.marker":
            return self._marker(data)
        if kind == "run.queued":
            for entry in self._entries.values():
                entry.queued_since_marker += 1
            self._queued_reasons.append(str(data.get("reason")))
            fields = self._run_fields(data)
            agent, reason, step = fields["agent"], fields["reason"], fields["step"]
            return [{"event": "run_queued", **fields, "text": f"{agent}: {reason} at {step}"}]
        if kind == "run.started":
            fields = self._run_fields(data)
            text = f"{fields['agent']} starts ({fields['reason']} at {fields['step']})"
            return [{"event": "run_started", **fields, "text": text}]
        if kind == "run.finished":
            fields = self._run_fields(data)
            text = f"{fields['agent']} ends its turn ({fields['reason']})"
            return [{"event": "run_finished", **fields, "text": text}]
        if kind == "run.failed":
            fields = self._run_fields(data)
            run = self.host.runs.get(str(data.get("run_id")))
            error = run.error_message if run is not None else None
            text = f"{fields['agent']} failed ({fields['reason']}): {error}"
            return [{"event": "run_failed", **fields, "error": error, "text": text}]
        if kind == "agent.output":
            return [self._said(data)]
        if kind == "decision.recorded":
            return self._decision(data)
        if kind == "agent_error.dispatched":
            return self._agent_error(data)
        return []

    def _moved(self, data: Mapping[str, Any]) -> list[Event]:
        b = self.board
        source = b.step_name(data.get("from_step_id"))
        target = b.step_name(data.get("to_step_id"))
        path = data.get("entry_path")
        out: list[Event] = [
            {
                "event": "move",
                "from_step": source,
                "to_step": target,
                "entry_path": path,
                "text": f"{source or '-'} -> {target} ({path})",
            }
        ]
        if data.get("queued"):
            return out  # waiting for a WIP slot: no arrival yet
        entry_id, seq = data.get("entry_id"), data.get("entry_seq")
        if entry_id is not None:
            self._entries[str(entry_id)] = _Entry(str(data.get("to_step_id")))
        out.append(
            {
                "event": "arrival",
                "step": target,
                "from_step": source,
                "entry_path": path,
                "entry_seq": seq,
                "text": f"{target}" + (f", entry #{seq}" if seq is not None else ""),
            }
        )
        return out

    def _marker(self, data: Mapping[str, Any]) -> list[Event]:
        entry = self._entries.get(str(data.get("entry_id")))
        if entry is None:
            return []
        if data.get("state") == "in_progress":
            entry.queued_since_marker = 0
            return []
        if data.get("state") not in _SETTLED:
            return []
        kind = str(data.get("kind"))
        step = self.board.workflow.step(entry.step_id)
        decl = (
            next((d for d in step.actions("on_enter") if d.position == data.get("position")), None)
            if step is not None
            else None
        )
        config = decl.config if decl is not None else {}
        detail: dict[str, Any] = {}
        if data.get("state") == "failed":
            detail["cause"] = data.get("reason")
        elif kind == "clear_decisions":
            detail["removed"] = self._decided.pop(entry.step_id, 0)
        elif kind == "queue_run_for_each_participant":
            # done: every matching seat got its run, inserted now (a run.queued event) or
            # already there from an earlier attempt of this entry (idempotency-suppressed)
            role = str(config.get("role", ""))
            matching = self.board.seats_at(entry.step_id, role)
            detail.update(
                role=role,
                matching=matching,
                enqueued=matching,
                suppressed=max(0, matching - entry.queued_since_marker),
            )
        elif kind == "queue_run":
            detail.update(target=config.get("target"), enqueued=entry.queued_since_marker)
        return [_action("on_enter", kind, self.board.step_name(entry.step_id), detail)]

    def _said(self, data: Mapping[str, Any]) -> Event:
        run = self._run(str(data.get("run_id")))
        agent = self.board.agent_name(run.agent_profile_id) if run else None
        said = str(data.get("text", ""))
        if agent and said.casefold().startswith(f"{agent.casefold()}: "):
            said = said[len(agent) + 2 :]  # the scripted agents sign their lines
        return {"event": "agent_said", "agent": agent, "said": said, "text": f"{agent}: {said}"}

    def _decision(self, data: Mapping[str, Any]) -> list[Event]:
        step_id = str(data.get("step_id"))
        self._decided[step_id] = self._decided.get(step_id, 0) + 1
        made = next(
            (
                d
                for d in self.host.decisions.list(self.board.task_id, step_id)
                if d.id == data.get("decision_id")
            ),
            None,
        )
        if made is None:
            return []
        step_name = self.board.step_name(step_id)
        agent = self.board.agent_name(made.decider_id)
        comment = f' "{made.comment}"' if made.comment else ""
        return [
            {
                "event": "decision",
                "step": step_name,
                "agent": agent,
                "role": made.role,
                "verdict": made.decision,
                "text": f"{agent} ({made.role}) at {step_name}: {made.decision}{comment}",
            }
        ]

    def _agent_error(self, data: Mapping[str, Any]) -> list[Event]:
        """The on_agent_error actions that ran (from the step's declaration and the runs
        queued since the failure), then the dispatch itself."""
        step_id = data.get("step_id")
        step = self.board.workflow.step(str(step_id)) if step_id else None
        step_name = self.board.step_name(step_id)
        out: list[Event] = []
        for decl in step.actions("on_agent_error") if step is not None else ():
            if decl.kind.startswith("move_to"):
                continue  # a move shows as its own move and arrival
            detail: dict[str, Any] = {}
            if decl.kind == "queue_run":
                # the executor's reason: the declared one, else the trigger's name
                reason = decl.config.get("reason") or "on_agent_error"
                enqueued = self._queued_reasons.count(reason)
                detail.update(target=decl.config.get("target"), enqueued=enqueued)
            out.append(_action("on_agent_error", decl.kind, step_name, detail))
        self._queued_reasons = []
        office = data.get("path") == "office"
        count = data.get("action_count")
        path = "Office's own path" if office else "the host's dispatch"
        actions = f"{count} action(s)" if count is not None else "dispatched"
        out.append(
            {
                "event": "agent_error",
                "path": "office" if office else "host",
                "run_id": data.get("run_id"),
                "operation_id": data.get("operation_id"),
                "step": step_name,
                "action_count": count,
                "text": f"on_agent_error at {step_name} ({path}): {actions}",
            }
        )
        return out


_DETAIL_ORDER: Final = ("role", "matching", "enqueued", "suppressed", "removed", "target", "cause")


def _action(trigger: str, kind: str, step: str | None, given: Mapping[str, Any]) -> Event:
    detail = {k: given[k] for k in _DETAIL_ORDER if k in given}
    if "removed" in detail:
        said = f"{detail['removed']} decision(s) removed"
    elif "matching" in detail:
        said = (
            f"{detail['enqueued']} run(s) queued for {detail['matching']} "
            f"{detail.get('role', '')} seat(s)"
        )
    elif "target" in detail:
        said = f"{detail.get('enqueued', 0)} run(s) queued for {detail['target']}"
    elif "cause" in detail:
        said = f"failed: {detail['cause']}"
    else:
        said = "done"
    return {
        "event": "action",
        "trigger": trigger,
        "action": kind,
        "step": step,
        **detail,
        "text": f"{trigger} {kind} at {step}: {said}",
    }


def _failures_where_they_happened(batch: list[_Pending]) -> list[_Pending]:
    """A failed run is finished once its recovery has run (the worker finishes the run last);
    read in commit order the recovery would come before the failure. Show the failure right
    after the run's own turn: its start and what the agent said."""
    out = list(batch)
    for item in [p for p in out if p.event["event"] == "run_failed"]:
        run_id = item.event.get("run_id")
        starts = [
            i
            for i, p in enumerate(out)
            if p.event["event"] == "run_started" and p.event.get("run_id") == run_id
        ]
        if not starts:
            continue
        out.remove(item)
        at = starts[0] + 1
        while at < len(out) and out[at].event["event"] == "agent_said":
            at += 1
        out.insert(at, attrs.evolve(item, when=out[at - 1].when))
    return out
