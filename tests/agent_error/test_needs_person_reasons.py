"""Issue 42 item 2, the reasons beyond a permission: `failure` (an agent failed terminally and
on_agent_error left the task for a person) and `blocked` (a task that has not finished blocks
it), each with its `task.needs_person_ended`; a hook subscribed to just those two event types
takes exactly them. (`verdict` is not written: no seat is a person's, core/store/waits.py.)"""

from __future__ import annotations

import pytest

from core import Host
from core.services import hooks
from core.store import events
from tests.agent_error.helpers import World, act, background, probe, wait_for

pytestmark = pytest.mark.slow  # real agent processes

PERSON = ("task.needs_person", "task.needs_person_ended")


def _person(host: Host, task_id: str) -> list[tuple[str, str]]:
    return [
        (e.type, str(e.data["reason"]))
        for e in events.read_all(host.store)
        if e.type in PERSON and e.task_id == task_id
    ]


def test_issue_42_item_2_a_failure_left_for_a_person_and_its_end(world: World) -> None:
    host = world.host
    hook = hooks.add(host.store, "http://127.0.0.1:9/x", PERSON, None)
    wf = world.board([probe("looked-at")])  # on_agent_error moves nothing, queues nothing
    task = world.task(wf)
    session = world.session(task, world.crashing(status=4))

    outcome = world.turn(session)

    assert outcome.route == "R1"
    assert _person(host, task.id) == [("task.needs_person", "failure")]
    [began] = [e for e in events.read_all(host.store) if e.type == "task.needs_person"]
    assert began.data["session_id"] == session.id
    assert "the build tool crashed" in began.data["error"]
    # a second failure while it waits is not a second call
    world.turn(session)
    assert _person(host, task.id) == [("task.needs_person", "failure")]
    # a person moves it on: the wait ends, once
    host.tasks.move(task.id, "Done")
    assert _person(host, task.id) == [
        ("task.needs_person", "failure"),
        ("task.needs_person_ended", "failure"),
    ]
    ended = [e for e in events.read_all(host.store) if e.type == "task.needs_person_ended"]
    assert ended[0].data["session_id"] == session.id
    # the hook takes just those two, in order
    assert hooks.take(host.store) == 2
    assert [d.type for d in hooks.deliveries(host.store, hook_id=hook.id)] == list(PERSON)


def test_issue_42_item_2_on_agent_error_that_restarts_the_agent_needs_no_person(
    world: World,
) -> None:
    wf = world.board([act("auto_start_agent")])
    task = world.task(wf)
    session = world.session(task, world.crashing(status=2))
    assert wait_for(background(lambda: world.turn(session)), timeout=30).route == "R1"
    assert _person(world.host, task.id) == []


def test_issue_42_item_2_on_agent_error_that_moves_the_task_needs_no_person(
    world: World,
) -> None:
    wf = world.board([act("move_to_step", step_position=1)])
    task = world.task(wf)
    session = world.session(task, world.crashing(status=2))
    world.turn(session)
    assert world.step_name(task.id) == "Recover"
    assert _person(world.host, task.id) == []


def test_issue_42_item_2_blocked_until_its_blocker_finishes(world: World) -> None:
    host = world.host
    hook = hooks.add(host.store, "http://127.0.0.1:9/x", PERSON, None)
    wf = world.board(None)
    task = world.task(wf, title="waits")
    first = world.task(wf, title="first")
    second = world.task(wf, title="second")
    host.blockers.block(task.id, first.id)
    host.blockers.block(task.id, second.id)  # already waiting: not a second call
    assert _person(host, task.id) == [("task.needs_person", "blocked")]
    host.blockers.unblock(task.id, first.id)  # second still blocks it
    assert _person(host, task.id) == [("task.needs_person", "blocked")]
    host.tasks.move(second.id, "Done")  # the last blocker finishes
    assert _person(host, task.id) == [
        ("task.needs_person", "blocked"),
        ("task.needs_person_ended", "blocked"),
    ]
    # blocked again, then unblocked by hand: its own end
    host.blockers.block(task.id, first.id)
    host.blockers.unblock(task.id, first.id)
    assert _person(host, task.id)[2:] == [
        ("task.needs_person", "blocked"),
        ("task.needs_person_ended", "blocked"),
    ]
    # a finished task blocks nobody: no wait
    other = world.task(wf, title="other")
    host.blockers.block(other.id, second.id)
    assert _person(host, other.id) == []
    hooks.take(host.store)
    assert [d.type for d in hooks.deliveries(host.store, hook_id=hook.id)] == [*PERSON, *PERSON]
