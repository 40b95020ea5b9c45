"""Every route that changes a task's step goes through one transition and hands each committed
arrival to the entry dispatcher exactly once, with its entry path (spec on-enter "Scope"; step
entry sequence AC-OFFICE-STEP-ENTRY-001.8 and 001.9)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from core.store import tables as t
from tests.transitions.conftest import Board, arrivals


def _only_arrival(
    board: Board, logs: list[dict[str, Any]], task_id: str, path: str, step: str
) -> None:
    """Exactly one arrival was dispatched, for this task, path and step, and at dispatch time
    the step change was already committed (seen from another connection)."""
    step_id = board.host.workflows.step(
        board.host.workflows.by_id(board.host.tasks.get(task_id).workflow_id or ""), step
    ).id
    got = [(a["task_id"], a["entry_path"], a["step_id"]) for a in arrivals(logs)]
    assert got == [(task_id, path, step_id)]
    assert board.probe.seen == [
        {
            "task_id": task_id,
            "step_id": step_id,
            "entry_path": path,
            "committed_step_id": step_id,
            "committed_admitted": True,
        }
    ]


def _history(board: Board, task_id: str) -> list[str]:
    with board.host.store.read() as conn:
        return list(
            conn.execute(
                sa.select(t.session_step_history.c.trigger)
                .where(t.session_step_history.c.task_id == task_id)
                .order_by(t.session_step_history.c.created_at)
            ).scalars()
        )


def test_e1_engine_transition_on_turn_complete(
    board: Board, laneway_logs: list[dict[str, Any]]
) -> None:
    task = board.task()
    result = board.host.turns.complete(task.id)
    assert result["transitioned"] is True
    _only_arrival(board, laneway_logs, task.id, "E1", "Check")
    assert _history(board, task.id) == ["auto_complete"]


def test_e1_engine_transition_on_turn_start(
    board: Board, laneway_logs: list[dict[str, Any]]
) -> None:
    task = board.task()
    result = board.host.turns.start(task.id)
    assert (result["transitioned"], board.step_name(task.id)) == (True, "Inbox")
    _only_arrival(board, laneway_logs, task.id, "E1", "Inbox")
    assert _history(board, task.id) == ["on_turn_start"]


def test_e2_manual_move(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    task = board.task()
    moved = board.host.tasks.move(task.id, "check")  # names are case-insensitive
    assert moved.workflow_step_id == board.board.step("Check").id  # type: ignore[union-attr]
    _only_arrival(board, laneway_logs, task.id, "E2", "Check")
    assert _history(board, task.id) == ["manual"]


def test_e3_wip_promotion(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    (wf,) = board.import_yaml(
        """
        version: 1
        type: kandev_workflow
        workflows:
          - name: Narrow
            steps:
              - {name: Todo, position: 0, is_start_step: true}
              - {name: Busy, position: 1, wip_limit: 1, events: {on_enter: [{type: probe}]}}
              - {name: Done, position: 2}
        """
    )
    first = board.host.tasks.create(workflow=wf.id, title="first")
    second = board.host.tasks.create(workflow=wf.id, title="second")
    board.host.sessions.start(second.id)
    board.host.tasks.move(first.id, "Busy")
    board.host.tasks.move(second.id, "Busy")  # full: stored queued, not an arrival
    assert [a["task_id"] for a in arrivals(laneway_logs)] == [first.id]
    laneway_logs.clear()
    board.host.tasks.move(first.id, "Done")  # vacates Busy: second is admitted in place
    got = [(a["task_id"], a["entry_path"]) for a in arrivals(laneway_logs)]
    assert got == [(first.id, "E2"), (second.id, "E3")]
    assert board.probe.seen[-1]["entry_path"] == "E3"
    assert board.probe.seen[-1]["committed_admitted"] is True
    assert _history(board, second.id) == ["manual", "queue_promotion"]


def test_e4_switch_workflow(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    task = board.task()
    moved = board.host.tasks.switch_workflow(task.id, workflow="other")
    assert moved.workflow_id == board.other.id
    _only_arrival(board, laneway_logs, task.id, "E4", "Start")
    assert _history(board, task.id) == ["switch_workflow"]


def test_e4_switch_workflow_to_named_step(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    task = board.task()
    board.host.tasks.switch_workflow(task.id, workflow=board.other.id, step="End")
    _only_arrival(board, laneway_logs, task.id, "E4", "End")


def test_e4_switch_workflow_declared_on_a_trigger(
    board: Board, laneway_logs: list[dict[str, Any]]
) -> None:
    (wf,) = board.import_yaml(
        """
        version: 1
        type: kandev_workflow
        workflows:
          - name: Handoff
            steps:
              - name: Hand
                position: 0
                is_start_step: true
                events:
                  on_turn_complete: [{type: switch_workflow, config: {workflow: Other, step: End}}]
        """
    )
    task = board.host.tasks.create(workflow=wf.id, title="handoff")
    board.host.sessions.start(task.id)
    board.host.turns.complete(task.id)
    _only_arrival(board, laneway_logs, task.id, "E4", "End")


def test_e5_generic_update(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    task = board.task()
    board.host.tasks.update(task.id, step="Done")
    _only_arrival(board, laneway_logs, task.id, "E5", "Done")
    assert board.host.tasks.get(task.id).state == "COMPLETED"  # Done is the terminal step
    assert _history(board, task.id) == ["task_update"]


def test_e5_task_start(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    task = board.task(step="Inbox")
    started = board.host.tasks.start(task.id)  # to the start step
    assert started.state == "IN_PROGRESS"
    _only_arrival(board, laneway_logs, task.id, "E5", "Doing")


# -- not arrivals ------------------------------------------------------------------------------


def test_creation_is_not_an_arrival(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    board.task()
    assert arrivals(laneway_logs) == []
    assert board.probe.seen == []


def test_reissuing_a_move_to_the_current_step_is_not_an_arrival(
    board: Board, laneway_logs: list[dict[str, Any]]
) -> None:
    task = board.task()
    board.host.tasks.move(task.id, "Doing")
    board.host.tasks.update(task.id, step="Doing")
    assert arrivals(laneway_logs) == []
    assert _history(board, task.id) == []


def test_queued_placement_is_not_an_arrival_until_admitted(
    board: Board, laneway_logs: list[dict[str, Any]]
) -> None:
    (wf,) = board.import_yaml(
        """
        version: 1
        type: kandev_workflow
        workflows:
          - name: Single
            steps:
              - {name: A, position: 0, is_start_step: true}
              - {name: B, position: 1, wip_limit: 1, events: {on_enter: [{type: probe}]}}
        """
    )
    holder = board.host.tasks.create(workflow=wf.id, title="holder", step="B")
    waiting = board.host.tasks.create(workflow=wf.id, title="waiting")
    board.host.sessions.start(waiting.id)
    queued = board.host.tasks.move(waiting.id, "B")
    assert (queued.wip_admitted, queued.queued_for_step_id) == (False, wf.step("B").id)  # type: ignore[union-attr]
    assert queued.queued_at is not None
    assert arrivals(laneway_logs) == []
    board.host.tasks.archive(holder.id)
    assert [(a["task_id"], a["entry_path"]) for a in arrivals(laneway_logs)] == [(waiting.id, "E3")]


def test_detach_is_not_an_arrival(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    task = board.task()
    detached = board.host.tasks.detach(task.id)
    assert (detached.workflow_id, detached.workflow_step_id) == (None, None)
    assert arrivals(laneway_logs) == []


def test_restore_step_is_not_an_arrival(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    task = board.task()
    board.host.tasks.move(task.id, "Check")
    laneway_logs.clear()
    board.probe.seen.clear()
    restored = board.host.tasks.restore_step(task.id, board.board.step("Doing").id)  # type: ignore[union-attr]
    assert restored.workflow_step_id == board.board.step("Doing").id  # type: ignore[union-attr]
    assert arrivals(laneway_logs) == []
    assert board.probe.seen == []


def test_a_task_without_a_session_still_arrives(
    board: Board, laneway_logs: list[dict[str, Any]]
) -> None:
    """The arrival is dispatched; the session kind is skipped for lack of a session."""
    task = board.task(session=False)
    board.host.tasks.move(task.id, "Check")
    assert [a["entry_path"] for a in arrivals(laneway_logs)] == ["E2"]
    assert board.probe.seen == []
