"""spec/on-enter-action-dispatch, group C (failure isolation): AC-C1 ... AC-C5, with the
AC-G2 field checks of the AC-C1, AC-C2 and AC-C3 records.

Failures are injected where a real deployment meets them: a run enqueue that errors (the host's
`runs.enqueue`, wrapped on this host instance), a seat without an agent profile (written
directly: the service refuses one), a queue_run target that does not resolve, and a decision
store that errors during clear_decisions.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.model import Workflow
from core.store import tables as t
from tests.on_enter.helpers import (
    World,
    act,
    assert_discrete,
    cause_of,
    fan_out_infos,
    open_world,
    problems,
    records,
    with_field,
)


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


def _fail_enqueue_for(world: World, agent_id: str, message: str = "queue unavailable") -> None:
    enqueue = world.host.runs.enqueue

    def failing(request: Any) -> Any:
        if request.agent_profile_id == agent_id:
            raise RuntimeError(message)
        return enqueue(request)

    world.host.runs.enqueue = failing  # type: ignore[method-assign]


# -- AC-C1 -----------------------------------------------------------------------------------------


def test_ac_c1_c3_partial_fan_out_failure_collects_and_continues(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C1 vs AC-C3 precedence (Verification): three matching participants, two failing for
    different reasons (an empty agent profile, AC-E2; an enqueue error): every participant is
    attempted, exactly two AC-C1 ERROR records carrying task id, step id, participant id, agent
    profile id and cause as discrete fields (AC-G2), zero AC-C3 action-level ERROR records,
    one AC-G1 INFO record, and a failed(cause) marker holding attempted=3, failed=2 and the
    first failure's cause in AC-A5 order. The action declared after the fan-out still runs
    (AC-C3's continue half governs the fan-out) and the step change stands (AC-C4)."""
    boss = world.profile("boss")
    wf = world.flow(
        [
            act("queue_run_for_each_participant", role="reviewer"),
            act("queue_run", target=f"agent_profile_id:{boss.id}", reason="after"),
        ]
    )
    target = world.step_id(wf)
    ra, rc = world.profile("ra"), world.profile("rc")
    seat_a = world.seat(wf, "reviewer", "ra", position=0)
    seat_b = world.raw_seat(target, "reviewer", "", position=1)
    seat_c = world.seat(wf, "reviewer", "rc", position=2)
    task = world.place(wf, "E2")
    _fail_enqueue_for(world, rc.id)
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")

    assert sorted((r.agent_profile_id, r.reason) for r in world.runs(task.id)) == sorted(
        [(ra.id, "on_enter"), (boss.id, "after")]
    )
    errors = records(laneway_logs, "ERROR")
    assert len(errors) == 2
    assert with_field(laneway_logs, "ERROR", "participant_id") == errors  # no AC-C3 record
    by_seat = {e["extra"]["participant_id"]: e for e in errors}
    assert set(by_seat) == {seat_b, seat_c}
    assert_discrete(
        by_seat[seat_b],
        {"task_id": task.id, "step_id": target, "participant_id": seat_b, "agent_profile_id": ""},
    )
    assert_discrete(
        by_seat[seat_c],
        {
            "task_id": task.id,
            "step_id": target,
            "participant_id": seat_c,
            "agent_profile_id": rc.id,
        },
    )
    assert by_seat[seat_b]["extra"]["cause"]
    assert "queue unavailable" in by_seat[seat_c]["extra"]["cause"]
    (info,) = fan_out_infos(laneway_logs, task.id)
    assert (info["extra"]["matching"], info["extra"]["enqueued"], info["extra"]["suppressed"]) == (
        3,
        1,
        0,
    )
    markers = world.markers(task.id)
    assert (markers[0].state, markers[1].state) == ("failed", "done")
    cause = cause_of(markers[0])
    assert (cause["attempted"], cause["failed"]) == (3, 2)
    assert cause["first_cause"] == by_seat[seat_b]["extra"]["cause"]  # b precedes c (AC-A5)
    assert seat_a
    assert world.host.tasks.get(task.id).workflow_step_id == target


def test_ac_c1_a_database_error_for_one_participant_keeps_the_others(
    world: World, request: pytest.FixtureRequest, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C1: the enqueue for one participant fails inside the database (a statement error, as
    a constraint or serialization failure would raise); the participants before and after it
    still get their runs, and the marker counts one failure of three."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    ra, rb, rc = world.profile("ra"), world.profile("rb"), world.profile("rc")
    world.seat(wf, "reviewer", "ra", position=0)
    world.seat(wf, "reviewer", "rb", position=1)
    world.seat(wf, "reviewer", "rc", position=2)
    task = world.place(wf, "E2")
    enqueue = world.host.runs.enqueue
    inserted: list[str] = []

    def failing_in_the_database(req: Any) -> Any:
        if req.agent_profile_id == rb.id:
            with world.host.store.transaction() as uow:  # the enqueue's own unit of work
                uow.conn.execute(  # a statement the database rejects (duplicate key)
                    sa.insert(t.runs).values(
                        id=inserted[0],
                        agent_profile_id=rb.id,
                        reason="x",
                        requested_at="2000-01-01T00:00:00.000000Z",
                    )
                )
        result = enqueue(req)
        inserted.append(result.run_id)
        return result

    world.host.runs.enqueue = failing_in_the_database  # type: ignore[method-assign]
    world.arrive(wf, task.id, "E2")
    assert sorted(r.agent_profile_id for r in world.runs(task.id)) == sorted([ra.id, rc.id])
    cause = cause_of(world.markers(task.id)[0])
    assert (cause["attempted"], cause["failed"]) == (3, 1)
    (error,) = records(laneway_logs, "ERROR")
    assert error["extra"]["agent_profile_id"] == rb.id


# -- AC-C2 -----------------------------------------------------------------------------------------


def test_ac_c2_failed_clear_decisions_stops_the_entry(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C2: clear_decisions fails: no remaining on_enter action runs (the fan-out, the
    review, queue_run, and auto_start_agent deferred to the end), those positions get no
    marker, one ERROR names workflow id, step id, task id and cause as discrete fields
    (AC-G2), no AC-C3 record follows, and the step change stands (AC-C4)."""
    boss = world.profile("boss")
    wf = world.flow(
        [
            act("auto_start_agent"),
            act("clear_decisions"),
            act("queue_run_for_each_participant", role="reviewer"),
            act("run_code_review"),
            act("queue_run", target=f"agent_profile_id:{boss.id}"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    target = world.step_id(wf)
    task = world.place(wf, "E1")
    seeded = world.add_decision(task.id, target)

    def broken(_uow: Any, _task_id: str, _step_id: str) -> int:
        raise RuntimeError("decision store unavailable")

    world.host.decisions.clear = broken  # type: ignore[method-assign]
    laneway_logs.clear()
    world.arrive(wf, task.id, "E1")

    assert world.runs(task.id) == []
    assert world.reviews(task.id) == []
    assert "prompts" not in world.meta(task.id)
    assert world.decision_ids(task.id, target) == [seeded]
    ((_entry, markers),) = world.entries(task.id)
    assert [(m.position, m.kind, m.state) for m in markers] == [(1, "clear_decisions", "failed")]
    (error,) = records(laneway_logs, "ERROR")
    assert_discrete(
        error,
        {
            "workflow_id": wf.id,
            "step_id": target,
            "task_id": task.id,
            "action_type": "clear_decisions",
        },
    )
    assert "decision store unavailable" in error["extra"]["cause"]
    assert world.host.tasks.get(task.id).workflow_step_id == target


# -- AC-C3 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["queue_run", "t_fail"])
def test_ac_c3_a_failed_action_is_logged_and_the_rest_still_run(
    world: World, failing: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C3: an action other than clear_decisions and the fan-out fails (queue_run whose
    target resolves to nobody, an ordinary failure under AC-A7; a plugin kind that fails):
    the remaining declared actions run, the marker is failed(cause) (AC-B5(c)), and one
    ERROR names workflow id, step id, action type and cause as discrete fields (AC-G2)."""
    decl = (
        act("queue_run", target="participant_role:approver")
        if failing == "queue_run"
        else act("t_fail", cause="plugin failed")
    )
    wf = world.flow(
        [decl, act("run_code_review"), act("queue_run_for_each_participant", role="reviewer")]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E2")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    target = world.step_id(wf)
    assert len(world.reviews(task.id)) == 1
    assert [r.agent_profile_id for r in world.runs(task.id)] == [world.profile("rev").id]
    markers = world.markers(task.id)
    assert [markers[p].state for p in (0, 1, 2)] == ["failed", "done", "done"]
    (error,) = records(laneway_logs, "ERROR")
    assert_discrete(error, {"workflow_id": wf.id, "step_id": target, "action_type": failing})
    assert error["extra"]["cause"] == markers[0].cause
    assert world.host.tasks.get(task.id).workflow_step_id == target


# -- AC-C4 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["fan_out", "clear_decisions", "queue_run", "t_fail"])
@pytest.mark.parametrize("path", ["E1", "E2"])
def test_ac_c4_a_failed_on_enter_action_never_rolls_the_step_back(
    world: World, failing: str, path: str
) -> None:
    """AC-C4: whichever on_enter action fails, the task's workflow_step_id is still the
    destination step afterwards, and the entry record of that arrival stays."""
    decl = {
        "fan_out": act("queue_run_for_each_participant", role="reviewer"),
        "clear_decisions": act("clear_decisions"),
        "queue_run": act("queue_run", target="participant_role:approver"),
        "t_fail": act("t_fail"),
    }[failing]
    wf = world.flow([decl])
    target = world.step_id(wf)
    world.raw_seat(target, "reviewer", "")  # the fan-out's only seat has no profile
    task = world.place(wf, path)
    if failing == "clear_decisions":

        def broken(*_args: Any) -> int:
            raise RuntimeError("boom")

        world.host.decisions.clear = broken  # type: ignore[method-assign]
    world.arrive(wf, task.id, path)
    after = world.host.tasks.get(task.id)
    assert (after.workflow_step_id, after.wip_admitted) == (target, True)
    assert world.markers(task.id)[0].state == "failed"


# -- AC-C5 -----------------------------------------------------------------------------------------


def _trigger_flow(world: World, trigger: str) -> tuple[Workflow, str]:
    boss = world.profile("boss")
    actions = [
        act("queue_run", target="participant_role:approver", reason="first"),  # fails
        act("queue_run", target=f"agent_profile_id:{boss.id}", reason="second"),
    ]
    src_events: dict[str, Any] = {}
    if trigger == "on_exit":
        src_events["on_exit"] = actions
    else:
        src_events[trigger] = [*actions, act("move_to_step", step_position=1)]
    (wf,) = world.import_doc(
        [
            {
                "name": f"C5-{trigger}",
                "steps": [
                    {"name": "Src", "position": 0, "is_start_step": True, "events": src_events},
                    {"name": "Target", "position": 1},
                    {"name": "Out", "position": 2},
                ],
            }
        ]
    )
    return wf, boss.id


@pytest.mark.parametrize("trigger", ["on_turn_complete", "on_turn_start", "on_exit"])
def test_ac_c5_other_triggers_keep_abort_on_first_failure(
    world: World, trigger: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C5: continue-past-failure is on_enter's only. On on_turn_complete, on_turn_start and
    on_exit a failing action still aborts the actions after it (no second run) and, for the
    turn triggers, the transition they declare does not happen."""
    wf, _boss = _trigger_flow(world, trigger)
    task = world.host.tasks.create(workflow=wf.id, title="t")
    world.host.sessions.start(task.id)
    laneway_logs.clear()
    if trigger == "on_turn_complete":
        result = world.host.turns.complete(task.id)
        assert result["transitioned"] is False
    elif trigger == "on_turn_start":
        result = world.host.turns.start(task.id)
        assert result["transitioned"] is False
    else:
        world.host.tasks.move(task.id, "Out")  # leaving Src runs its on_exit
    assert world.runs(task.id) == []
    expected_step = "Out" if trigger == "on_exit" else "Src"
    assert world.host.tasks.get(task.id).workflow_step_id == world.step_id(wf, expected_step)
    errors = records(laneway_logs, "ERROR", trigger=trigger)
    assert len(errors) == 1
    assert problems(laneway_logs) == errors
