"""The walk: start the task and run the worker until it reaches Done."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from office_plugin.demo.board import Board, DemoFailed, build_board
from office_plugin.demo.timeline import Event, OnEvent, Timeline
from plugins.api import Run
from plugins.app import worker

if TYPE_CHECKING:
    from plugins.app import Host

MAX_RUNS: Final = 40
"""A walk that needs more runs than this is going round in circles: the demo stops."""


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


def walk(host: Host, board: Board, *, on_event: OnEvent | None = None) -> DemoResult:
    """Start the board's task and run the worker until it reaches Done (or cannot)."""
    timeline = Timeline(host, board, on_event)
    unsubscribe = host.subscribe(timeline.laneway_event)
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
        unsubscribe()
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
