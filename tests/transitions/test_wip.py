"""WIP limits: moves into a full step queue (never fail), vacating admits in the reference's
order, creation into a full step uses the feeder (kandev-domain 6.3)."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import Conflict
from core.model import Workflow
from tests.transitions.conftest import Board, arrivals

LANE = """
version: 1
type: kandev_workflow
workflows:
  - name: Lane
    steps:
      - {name: Feed, position: 0, is_start_step: true, wip_limit: 2}
      - {name: Work, position: 1, wip_limit: 1, pull_from_step_position: 0,
         events: {on_enter: [{type: probe}]}}
      - {name: Out, position: 2}
"""


@pytest.fixture
def lane(board: Board) -> Workflow:
    (wf,) = board.import_yaml(LANE)
    return wf


def test_move_into_a_full_step_is_stored_queued(board: Board, lane: Workflow) -> None:
    board.host.tasks.create(workflow=lane.id, title="holder", step="Work")
    mover = board.host.tasks.create(workflow=lane.id, title="mover", step="Out")
    queued = board.host.tasks.move(mover.id, "Work")
    work = lane.step("Work")
    assert work is not None
    assert (queued.workflow_step_id, queued.wip_admitted, queued.queued_for_step_id) == (
        work.id,
        False,
        work.id,
    )


def test_queued_tasks_in_the_step_go_before_feeder_tasks_in_reference_order(
    board: Board, lane: Workflow, laneway_logs: list[dict[str, Any]]
) -> None:
    holder = board.host.tasks.create(workflow=lane.id, title="holder", step="Work")
    board.host.tasks.create(workflow=lane.id, title="in feeder")  # waits in Feed
    low = board.host.tasks.create(workflow=lane.id, title="low", step="Out", priority="low")
    high = board.host.tasks.create(workflow=lane.id, title="high", step="Out", priority="high")
    board.host.tasks.move(low.id, "Work")  # queued first
    board.host.tasks.move(high.id, "Work")  # queued later but higher priority
    laneway_logs.clear()
    board.host.tasks.move(holder.id, "Out")
    promoted = [a["task_id"] for a in arrivals(laneway_logs) if a["entry_path"] == "E3"]
    assert promoted == [high.id]
    board.host.tasks.move(high.id, "Out")
    board.host.tasks.move(low.id, "Out")
    names = [a["task_id"] for a in arrivals(laneway_logs) if a["entry_path"] == "E3"]
    assert names[1] == low.id  # then the other queued task
    # then, with nothing queued in Work, the feeder's task is pulled forward
    feeder_task = next(t for t in board.host.tasks.list(workflow=lane.id) if t.title == "in feeder")
    assert names[2] == feeder_task.id
    assert board.step_name(feeder_task.id) == "Work"


def test_order_falls_back_to_queued_at_then_created_at(board: Board, lane: Workflow) -> None:
    holder = board.host.tasks.create(workflow=lane.id, title="holder", step="Work")
    a = board.host.tasks.create(workflow=lane.id, title="a", step="Out")
    b = board.host.tasks.create(workflow=lane.id, title="b", step="Out")
    board.host.tasks.move(b.id, "Work")  # b queued before a
    board.host.tasks.move(a.id, "Work")
    board.host.tasks.move(holder.id, "Out")
    assert board.host.tasks.get(b.id).wip_admitted is True
    assert board.host.tasks.get(a.id).wip_admitted is False


def test_creation_into_a_full_step_with_a_feeder_lands_in_the_feeder(
    board: Board, lane: Workflow, laneway_logs: list[dict[str, Any]]
) -> None:
    board.host.tasks.create(workflow=lane.id, title="holder", step="Work")
    created = board.host.tasks.create(workflow=lane.id, title="new", step="Work")
    feed, work = lane.step("Feed"), lane.step("Work")
    assert feed is not None
    assert work is not None
    assert (created.workflow_step_id, created.wip_admitted, created.queued_for_step_id) == (
        feed.id,
        True,
        work.id,
    )
    assert arrivals(laneway_logs) == []


def test_creation_fails_when_the_feeder_is_full_too(board: Board, lane: Workflow) -> None:
    board.host.tasks.create(workflow=lane.id, title="holder", step="Work")
    board.host.tasks.create(workflow=lane.id, title="f1")
    board.host.tasks.create(workflow=lane.id, title="f2")
    with pytest.raises(Conflict, match="full"):
        board.host.tasks.create(workflow=lane.id, title="no room", step="Work")


def test_creation_into_a_full_step_without_feeder_is_queued_in_place(board: Board) -> None:
    (wf,) = board.import_yaml(
        """
        version: 1
        type: kandev_workflow
        workflows:
          - name: NoFeed
            steps:
              - {name: Only, position: 0, is_start_step: true, wip_limit: 1}
        """
    )
    board.host.tasks.create(workflow=wf.id, title="one")
    two = board.host.tasks.create(workflow=wf.id, title="two")
    assert (two.wip_admitted, two.queued_for_step_id) == (False, wf.steps[0].id)


def test_feeder_task_pulled_forward_is_an_e3_arrival_that_vacates_the_feeder(
    board: Board, lane: Workflow, laneway_logs: list[dict[str, Any]]
) -> None:
    holder = board.host.tasks.create(workflow=lane.id, title="holder", step="Work")
    fed = board.host.tasks.create(workflow=lane.id, title="fed")
    board.host.sessions.start(fed.id)
    board.host.tasks.move(holder.id, "Out")
    assert board.step_name(fed.id) == "Work"
    e3 = [a for a in arrivals(laneway_logs) if a["entry_path"] == "E3"]
    assert [(a["task_id"], a["from_step_id"]) for a in e3] == [(fed.id, lane.step("Feed").id)]  # type: ignore[union-attr]
    assert board.probe.seen[-1]["entry_path"] == "E3"


def test_a_feeder_task_with_a_running_agent_is_not_pulled(board: Board, lane: Workflow) -> None:
    holder = board.host.tasks.create(workflow=lane.id, title="holder", step="Work")
    busy = board.host.tasks.create(workflow=lane.id, title="busy")
    session = board.host.sessions.start(busy.id)
    board.host.sessions.set_state(session.id, "RUNNING")
    board.host.tasks.move(holder.id, "Out")
    assert board.step_name(busy.id) == "Feed"
