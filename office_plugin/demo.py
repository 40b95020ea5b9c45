"""`laneway demo`: the Office loop end to end, with scripted agents, in a few seconds.

Office's showcase, so it lives with Office and adds its command through
`laneway_cli_commands`. It builds an Office Default board on the host it is given: a worker
that fails terminally on its first run, two reviewers (the first rejects its first review, then
approves; the second always approves), an approver and a CEO, all of them the scripted agents
of `core.runtime.scripted`. It creates one task, starts it, and runs the worker until the task
stands at Done, recording a timeline as it goes.

The timeline is read from the board's events (the `laneway_event` hook: task moved, entry
markers, runs queued/started/finished/failed, decisions, on_agent_error dispatches, agent
output), never from log records: a message reworded anywhere cannot change it. Names (agents,
steps) and a decision's comment are read through the host's services.

The timeline is a list of plain dicts (`at` seconds since the start, `event`, the names of
the step and agent involved, and `text`, one readable sentence), so the command line can print
it as it grows and `--json` can hand it over whole.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from core import ids, worker
from core.errors import LanewayError
from core.model import Run, Workflow
from core.runtime import scripted
from core.store.events import Event as BoardEvent
from plugins import hookimpl

if TYPE_CHECKING:
    from core.host import Host

TEMPLATE: Final = "office-default"
TITLE: Final = "Sync the git mirror"
DESCRIPTION: Final = "Mirror the main repository to the backup remote every night."
MAX_RUNS: Final = 40
"""A walk that needs more runs than this is going round in circles: the demo stops."""

Event = dict[str, Any]
OnEvent = Callable[[Event], None]


class DemoFailed(LanewayError):
    """The walk did not reach Done; the message says where it stopped and why."""


@attrs.frozen
class Board:
    """What the demo built: ids, and the names it prints them by."""

    workflow: Workflow
    task_id: str
    profiles: Mapping[str, str]
    """Agent profile id -> name."""
    state_dir: Path
    seats: Mapping[tuple[str, str], int] = attrs.field(factory=dict)
    """(step id, role) -> how many seats the demo put there."""

    def seats_at(self, step_id: str, role: str) -> int:
        return self.seats.get((step_id, role), 0)

    def step_name(self, step_id: str | None) -> str | None:
        if step_id is None:
            return None
        step = self.workflow.step(step_id)
        return step.name if step is not None else step_id

    def agent_name(self, profile_id: str | None) -> str | None:
        if profile_id is None:
            return None
        return self.profiles.get(profile_id, profile_id)


@attrs.frozen
class DemoResult:
    task_id: str
    final_step: str | None
    task_state: str
    timeline: tuple[Event, ...]
    runs: tuple[Run, ...]
    summary: worker.WorkerSummary
    elapsed: float
    board: Board

    @property
    def done(self) -> bool:
        return self.final_step == "Done"

    def as_json(self) -> dict[str, Any]:
        """What `laneway --json demo` prints."""
        return {
            "task_id": self.task_id,
            "final_step": self.final_step,
            "timeline": list(self.timeline),
        }


# -- the board -------------------------------------------------------------------------------


def agent_command(role: str, *args: str) -> tuple[str, ...]:
    """A scripted agent's command line.

    The script is run by its path rather than with `-m core.runtime.scripted`: `-m` imports
    the `core` package first (the host, SQLAlchemy, alembic), which costs about a second per
    agent turn; the script itself needs only the standard library.
    """
    return (sys.executable, str(Path(scripted.__file__).resolve()), role, *args)


def _free_name(taken: set[str], base: str) -> str:
    """`base`, or `base-2`, `base-3`, ... when that name is taken (a reused --db)."""
    name, n = base, 1
    while name.casefold() in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name.casefold())
    return name


def build_board(host: Host, state_dir: Path) -> Board:
    """Office Default with scripted agents in its seats, and one task (not started yet)."""
    kind = host.registry.kind("queue_run_for_each_participant")
    if not host.features.office or kind is None or not kind.executable:
        raise DemoFailed(
            "the demo needs the office plugin with its feature on (drop --no-office, turn "
            "the board's office on with `laneway features set office=on`, and allow the "
            "office plugin)"
        )
    state_dir.mkdir(parents=True, exist_ok=True)
    workflows = {w.name.casefold() for w in host.workflows.list()}
    workflow = host.workflows.create_from_template(
        TEMPLATE, name=_free_name(workflows, "Office Default")
    )
    host.workspace.set(office_workflow=workflow.id)
    taken = {p.name.casefold() for p in host.profiles.list()}
    plan = [
        ("worker", "worker", ("worker", "--fail-first", str(state_dir / "worker-failed"))),
        (
            "reviewer-1",
            "reviewer",
            ("reviewer", "--verdicts", "rejected,approved", "--state", str(state_dir / "r1")),
        ),
        ("reviewer-2", "reviewer", ("reviewer", "--state", str(state_dir / "r2"))),
        ("approver", "approver", ("approver",)),
        ("ceo", "ceo", ("ceo",)),
    ]
    made: dict[str, str] = {}
    names: dict[str, str] = {}
    for base, role, command in plan:
        profile = host.profiles.add(
            _free_name(taken, base), command=agent_command(*command), role=role
        )
        made[base] = profile.id
        names[profile.id] = profile.name
    seats = [
        ("Work", "runner", "worker"),
        ("Review", "reviewer", "reviewer-1"),
        ("Review", "reviewer", "reviewer-2"),
        ("Approval", "approver", "approver"),
    ]
    for step, role, base in seats:
        host.participants.add(step=step, role=role, profile=made[base], workflow=workflow.id)
    task = host.tasks.create(workflow=workflow.id, title=TITLE, description=DESCRIPTION)
    built = host.workflows.by_id(workflow.id)
    by_name = {s.name: s.id for s in built.steps}
    counts: dict[tuple[str, str], int] = {}
    for step, role, _base in seats:
        counts[(by_name[step], role)] = counts.get((by_name[step], role), 0) + 1
    return Board(built, task.id, names, state_dir, counts)


# -- the timeline ----------------------------------------------------------------------------

_LABELS: Final = {
    "task_started": "start",
    "run_queued": "queued",
    "run_started": "run",
    "run_finished": "run",
    "run_failed": "FAILED",
    "agent_said": "agent",
    "agent_error": "recovery",
    "action": "action",
    "move": "move",
    "arrival": "arrival",
    "decision": "decision",
}
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

    Registered as a plugin for the walk's length: `laneway_event` runs on whichever thread
    committed (the worker runs agents on a pool), so it only stores the event; `flush`, called
    on the worker's own thread after each run, reads names through the host's services and
    emits the events in commit order.
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

    @hookimpl
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
                self.add(ids.parse(board_event.at), event)
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


# -- the walk --------------------------------------------------------------------------------


def walk(host: Host, board: Board, *, on_event: OnEvent | None = None) -> DemoResult:
    """Start the board's task and run the worker until it reaches Done (or cannot)."""
    timeline = Timeline(host, board, on_event)
    manager = host.bundle.registry.hooks.manager
    manager.register(timeline, name=f"office-demo-{board.task_id}")
    clock = time.monotonic()
    claimed = finished = failed = 0
    try:
        starting = datetime.now(UTC)
        task = host.tasks.start(board.task_id)
        # added before flush turns the start's own events into timeline events: it leads
        timeline.add(
            starting,
            {
                "event": "task_started",
                "task_id": task.id,
                "step": board.step_name(task.workflow_step_id),
                "text": f'task "{task.title}" started at {board.step_name(task.workflow_step_id)}',
            },
        )
        timeline.flush()

        def progress(kind: str, _run: Run, _outcome: Any) -> None:
            if kind != "claimed":  # a run's start, recovery and failure: one batch
                timeline.flush()

        while claimed < MAX_RUNS:
            summary = worker.work(host, once=True, max_runs=MAX_RUNS - claimed, progress=progress)
            claimed += summary.claimed
            finished += summary.finished
            failed += summary.failed
            task = host.tasks.get(board.task_id)
            if board.step_name(task.workflow_step_id) == "Done" or summary.claimed == 0:
                break
        timeline.flush()
    finally:
        manager.unregister(timeline)
    task = host.tasks.get(board.task_id)
    return DemoResult(
        task_id=task.id,
        final_step=board.step_name(task.workflow_step_id),
        task_state=task.state,
        timeline=tuple(timeline.events),
        runs=tuple(host.runs.list(task=task.id)),
        summary=worker.WorkerSummary(claimed, finished, failed),
        elapsed=time.monotonic() - clock,
        board=board,
    )


def require_done(result: DemoResult) -> DemoResult:
    """`result` when its task reached Done; else `DemoFailed` saying where it stopped."""
    if result.done:
        return result
    left = len([r for r in result.runs if r.status == "queued"])
    why = (
        f"it took more than {MAX_RUNS} runs"
        if result.summary.claimed >= MAX_RUNS
        else f"no run was left to take ({left} queued)"
    )
    raise DemoFailed(
        f"the demo task {result.task_id} stopped at {result.final_step} "
        f"({result.task_state}): {why}"
    )


def run(host: Host, state_dir: Path, *, on_event: OnEvent | None = None) -> DemoResult:
    """Build the board and walk its task to Done; `DemoFailed` when it does not get there."""
    board = build_board(host, state_dir)
    return require_done(walk(host, board, on_event=on_event))


# -- printing --------------------------------------------------------------------------------


def event_line(event: Mapping[str, Any]) -> str:
    label = _LABELS.get(str(event["event"]), str(event["event"]))
    return f"{event['at']:7.2f}s  {label:<9} {event['text']}"


def summary_lines(result: DemoResult) -> list[str]:
    """The runs as a table, then one line about the outcome."""
    rows = [("#", "agent", "reason", "step", "status", "seconds")]
    for n, run in enumerate(result.runs, 1):
        seconds = "-"
        if run.claimed_at and run.finished_at:
            took = ids.parse(run.finished_at) - ids.parse(run.claimed_at)
            seconds = f"{took.total_seconds():.2f}"
        rows.append(
            (
                str(n),
                result.board.agent_name(run.agent_profile_id) or "-",
                run.reason,
                result.board.step_name(run.workflow_step_id) or "-",
                run.status,
                seconds,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    decisions = [e for e in result.timeline if e["event"] == "decision"]
    rounds = sorted({(e["step"], e.get("entry_seq")) for e in decisions}, key=str)
    s = result.summary
    lines.append("")
    lines.append(
        f"task {result.task_id} reached {result.final_step} ({result.task_state}): "
        f"{s.claimed} runs ({s.finished} finished, {s.failed} failed), "
        f"{len(decisions)} decisions over {len(rounds)} rounds, in {result.elapsed:.1f}s"
    )
    return lines
