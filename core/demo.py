"""`laneway demo`: the Office loop end to end, with scripted agents, in a few seconds.

The demo builds an Office Default board on the host it is given: a worker that fails
terminally on its first run, two reviewers (the first rejects its first review, then
approves; the second always approves), an approver and a CEO, all of them the scripted agents
of `core.runtime.scripted`. It creates one task, starts it, and runs the worker until the
task stands at Done, recording a timeline as it goes:

- arrivals, moves and entry actions, from laneway's own log records (matched on their
  discrete fields, never parsed out of text), gathered by a loguru list sink;
- runs queued, and decisions, read from the database after each run (no log record names a
  decision, and the runs table is the truth about what was queued);
- runs started and finished, agent output and on_agent_error dispatches, again from records.

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
from loguru import logger

from core import ids, logs, worker
from core.errors import LanewayError
from core.model import Run, Workflow
from core.runtime import scripted

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
    return Board(host.workflows.by_id(workflow.id), task.id, names, state_dir)


# -- the timeline ----------------------------------------------------------------------------

_RECORDS: Final = frozenset(
    {
        "arrival",
        "step change committed",
        "run started",
        "run finished",
        "agent says",
        "office on_agent_error dispatched",
    }
)
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


@attrs.frozen
class _Pending:
    when: datetime
    order: int
    event: Event


class Timeline:
    """Collects the walk's events; `flush` orders what arrived and hands it on.

    The loguru sink runs on whichever thread logs (the worker runs agents on a pool), so it
    only stores records; `flush`, called on the worker's own thread after each run, reads the
    database, turns records into events and emits them in the order they happened.
    """

    def __init__(self, host: Host, board: Board, on_event: OnEvent | None) -> None:
        self.host = host
        self.board = board
        self.on_event = on_event
        self.started = datetime.now(UTC)
        self.events: list[Event] = []
        self._records: list[tuple[datetime, int, str, dict[str, Any]]] = []
        self._pending: list[_Pending] = []
        self._lock = threading.Lock()
        self._order = 0
        self._runs: dict[str, Run] = {}
        self._decisions: set[str] = set()
        self._entry_seq: dict[str, int] = {}

    # loguru sink: any thread
    def sink(self, message: Any) -> None:
        record = message.record
        extra = dict(record["extra"])
        if extra.get("task_id") != self.board.task_id:
            return
        text = record["message"]
        if text not in _RECORDS and "action_type" not in extra and "event" not in extra:
            return
        with self._lock:
            self._order += 1
            self._records.append((record["time"], self._order, text, extra))

    def add(self, when: datetime, event: Event) -> None:
        with self._lock:
            self._order += 1
            self._pending.append(_Pending(when, self._order, event))

    def flush(self) -> None:
        """Read what happened since the last flush and emit it in order."""
        self._read_runs()
        self._read_decisions()
        with self._lock:
            records, self._records = self._records, []
        converted = [
            (when, order, self._from_record(text, extra)) for when, order, text, extra in records
        ]
        with self._lock:
            batch = [_Pending(w, o, e) for w, o, e in converted if e is not None]
            batch.extend(self._pending)
            self._pending = []
        batch.sort(key=lambda p: (p.when, p.order))
        for item in _failures_where_they_happened(batch):
            self._emit(item)

    def _emit(self, item: _Pending) -> None:
        event = item.event
        if event["event"] == "arrival" and event.get("entry_seq") is not None:
            self._entry_seq[event["step"]] = int(event["entry_seq"])
        if event["event"] == "decision":
            event["entry_seq"] = self._entry_seq.get(event["step"])
        seconds = max(0.0, (item.when - self.started).total_seconds())
        shaped = {"at": round(seconds, 3), **event}
        self.events.append(shaped)
        if self.on_event is not None:
            self.on_event(shaped)

    # -- from the database

    def _read_runs(self) -> None:
        for run in self.host.runs.list(task=self.board.task_id):
            known = run.id in self._runs
            self._runs[run.id] = run
            if known:
                continue
            step = self.board.step_name(run.workflow_step_id)
            agent = self.board.agent_name(run.agent_profile_id)
            self.add(
                ids.parse(run.requested_at),
                {
                    "event": "run_queued",
                    "run_id": run.id,
                    "agent": agent,
                    "reason": run.reason,
                    "step": step,
                    "text": f"{agent}: {run.reason} at {step}",
                },
            )

    def _read_decisions(self) -> None:
        for step_id, step_name in ((s.id, s.name) for s in self.board.workflow.steps):
            for made in self.host.decisions.list(self.board.task_id, step_id):
                if made.id in self._decisions:
                    continue
                self._decisions.add(made.id)
                agent = self.board.agent_name(made.decider_id)
                comment = f' "{made.comment}"' if made.comment else ""
                self.add(
                    ids.parse(made.decided_at),
                    {
                        "event": "decision",
                        "step": step_name,
                        "agent": agent,
                        "role": made.role,
                        "verdict": made.decision,
                        "text": f"{agent} ({made.role}) at {step_name}: {made.decision}{comment}",
                    },
                )

    # -- from log records

    def _run_fields(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        run = self._runs.get(str(extra.get("run_id")))
        return {
            "run_id": extra.get("run_id"),
            "agent": self.board.agent_name(extra.get("agent_profile_id"))
            or (self.board.agent_name(run.agent_profile_id) if run else None),
            "reason": extra.get("reason") or (run.reason if run else None),
            "step": self.board.step_name(run.workflow_step_id) if run else None,
        }

    def _from_record(self, text: str, extra: Mapping[str, Any]) -> Event | None:
        b = self.board
        if extra.get("event") == "arrival":
            seq = extra.get("entry_seq")
            step = extra.get("step_name")
            return {
                "event": "arrival",
                "step": step,
                "from_step": b.step_name(extra.get("from_step_id")),
                "entry_path": extra.get("entry_path"),
                "entry_seq": seq,
                "text": f"{step}" + (f", entry #{seq}" if seq is not None else ""),
            }
        if text == "step change committed":
            source = b.step_name(extra.get("from_step_id"))
            target = extra.get("step_name")
            path = extra.get("entry_path")
            return {
                "event": "move",
                "from_step": source,
                "to_step": target,
                "entry_path": path,
                "text": f"{source or '-'} -> {target} ({path})",
            }
        if text == "run started":
            fields = self._run_fields(extra)
            return {
                "event": "run_started",
                **fields,
                "text": f"{fields['agent']} starts ({fields['reason']} at {fields['step']})",
            }
        if text == "run finished":
            fields = self._run_fields(extra)
            if extra.get("ok"):
                return {
                    "event": "run_finished",
                    **fields,
                    "text": f"{fields['agent']} ends its turn ({fields['reason']})",
                }
            error = extra.get("error")
            return {
                "event": "run_failed",
                **fields,
                "error": error,
                "text": f"{fields['agent']} failed ({fields['reason']}): {error}",
            }
        if text == "agent says":
            run = self._runs.get(str(extra.get("run_id")))
            agent = b.agent_name(run.agent_profile_id) if run else None
            said = str(extra.get("agent_log", ""))
            if agent and said.casefold().startswith(f"{agent.casefold()}: "):
                said = said[len(agent) + 2 :]  # the scripted agents sign their lines
            return {"event": "agent_said", "agent": agent, "said": said, "text": f"{agent}: {said}"}
        if text == "office on_agent_error dispatched" or (
            extra.get("event") == "agent_error.dispatch"
            and text.startswith("on_agent_error dispatched")
        ):
            return self._agent_error(text, extra)
        if "action_type" in extra:
            return self._action(extra)
        return None

    def _agent_error(self, text: str, extra: Mapping[str, Any]) -> Event:
        office = text == "office on_agent_error dispatched"
        task = self.host.tasks.get(self.board.task_id)
        step = self.board.step_name(extra.get("step_id")) or self.board.step_name(
            task.workflow_step_id
        )
        count = extra.get("action_count")
        path = "Office's own path" if office else "the host's dispatch"
        actions = f"{count} action(s)" if count is not None else "dispatched"
        return {
            "event": "agent_error",
            "path": "office" if office else "host",
            "run_id": extra.get("run_id"),
            "operation_id": extra.get("operation_id"),
            "step": step,
            "action_count": count,
            "text": f"on_agent_error at {step} ({path}): {actions}",
        }

    def _action(self, extra: Mapping[str, Any]) -> Event:
        trigger = str(extra.get("trigger") or "on_enter")
        kind = str(extra["action_type"])
        step = extra.get("step_name")
        detail = {
            k: extra[k]
            for k in (
                "role",
                "matching",
                "enqueued",
                "suppressed",
                "removed",
                "target",
                "cause",
                "review_id",
            )
            if k in extra
        }
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
    """A failed run is logged once its recovery has run (the worker finishes the run last);
    read in time order the recovery would come before the failure. Show the failure right
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


def _logging_enabled() -> bool:
    """Whether laneway's packages log now (a host application may have enabled them)."""
    seen: list[bool] = []
    probe = logger.add(
        lambda _m: seen.append(True),
        level="TRACE",
        filter=lambda r: r["extra"].get("demo_probe") is True,
    )
    try:
        logger.bind(demo_probe=True).trace("probe")
    finally:
        logger.remove(probe)
    return bool(seen)


def walk(host: Host, board: Board, *, on_event: OnEvent | None = None) -> DemoResult:
    """Start the board's task and run the worker until it reaches Done (or cannot)."""
    timeline = Timeline(host, board, on_event)
    was_enabled = _logging_enabled()
    for name in logs.PACKAGES:
        logger.enable(name)
    handler = logger.add(timeline.sink, level="DEBUG")
    clock = time.monotonic()
    claimed = finished = failed = 0
    try:
        starting = datetime.now(UTC)
        task = host.tasks.start(board.task_id)
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

        def progress(_kind: str, _run: Run, _outcome: Any) -> None:
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
        logger.remove(handler)
        if not was_enabled:
            logs.disable()
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
