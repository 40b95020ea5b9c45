"""spec/on-enter-action-dispatch, group G (observability): AC-G1 and AC-G2.

Records are asserted through the `laneway_logs` fixture (plugins.testing): on their level and
their discrete `extra` fields, never on message text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.on_enter.helpers import (
    World,
    act,
    assert_discrete,
    fan_out_infos,
    open_world,
    problems,
)

RULES = [{"agent_name": "claude", "operation": "keep"}]


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


# -- AC-G1 -----------------------------------------------------------------------------------------


def test_ac_g1_fan_out_info_record_on_success(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-G1: when the fan-out finishes, one INFO record names task id, step id, configured
    role, matching participants, runs enqueued and runs idempotency-suppressed, as discrete
    fields."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "r1")
    world.seat(wf, "reviewer", "r2", position=1)
    world.seat(wf, "approver", "a1")
    task = world.place(wf, "E2")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    (info,) = fan_out_infos(laneway_logs, task.id)
    assert_discrete(
        info,
        {
            "task_id": task.id,
            "step_id": world.step_id(wf),
            "role": "reviewer",
            "matching": 2,
            "enqueued": 2,
            "suppressed": 0,
        },
    )


def test_ac_g1_fan_out_info_record_on_partial_failure(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-G1 on the partial-failure path (AC-C1): the INFO record is still emitted, with the
    failed participant counted as matching but not as enqueued; enqueued and suppressed are
    reported separately."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "r1")
    world.seat(wf, "reviewer", "r2", position=1)
    world.seat(wf, "reviewer", "r3", position=2)
    broken = world.profile("r2").id
    task = world.place(wf, "E2")
    enqueue = world.host.runs.enqueue

    def failing(request: Any) -> Any:
        if request.agent_profile_id == broken:
            raise RuntimeError("queue unavailable")
        return enqueue(request)

    world.host.runs.enqueue = failing  # type: ignore[method-assign]
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    (info,) = fan_out_infos(laneway_logs, task.id)
    assert_discrete(
        info,
        {
            "task_id": task.id,
            "step_id": world.step_id(wf),
            "role": "reviewer",
            "matching": 3,
            "enqueued": 2,
            "suppressed": 0,
        },
    )


def test_ac_g1_fan_out_info_record_when_nobody_matches(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-G1: a fan-out that matched nobody also finished (AC-E1: it does not fail the entry),
    so its INFO record is emitted, with matching=0, enqueued=0, suppressed=0; an absent record
    must mean the action never finished."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    task = world.place(wf, "E2")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    assert world.markers(task.id)[0].state == "done"  # it did finish
    (info,) = fan_out_infos(laneway_logs, task.id)
    assert_discrete(
        info,
        {
            "task_id": task.id,
            "step_id": world.step_id(wf),
            "role": "reviewer",
            "matching": 0,
            "enqueued": 0,
            "suppressed": 0,
        },
    )


# -- AC-G2 -----------------------------------------------------------------------------------------

Scenario = Callable[[World], tuple[str, dict[str, Any], list[str]]]
"""Sets up and drives one diagnostic; returns (level, expected fields, present-only fields)."""


def _a6_unrecognised(world: World) -> tuple[str, dict[str, Any], list[str]]:
    wf = world.flow([act("frobnicate")])
    world.enter(wf, "E2")
    fields = {
        "workflow_id": wf.id,
        "step_id": world.step_id(wf),
        "step_name": "Target",
        "action_type": "frobnicate",
    }
    return "WARNING", fields, []


def _a6_no_executor(world: World) -> tuple[str, dict[str, Any], list[str]]:
    wf = world.flow([act("run_code_review")])
    world.host.set_features(office=False)
    world.enter(wf, "E2")
    fields = {
        "workflow_id": wf.id,
        "step_id": world.step_id(wf),
        "step_name": "Target",
        "action_type": "run_code_review",
    }
    return "WARNING", fields, []


def _a6_configure_on_e4(world: World) -> tuple[str, dict[str, Any], list[str]]:
    wf = world.flow([act("configure_session", rules=RULES)])
    world.enter(wf, "E4")
    fields = {
        "workflow_id": wf.id,
        "step_id": world.step_id(wf),
        "step_name": "Target",
        "action_type": "configure_session",
        "entry_path": "E4",
    }
    return "WARNING", fields, []


def _c1(world: World) -> tuple[str, dict[str, Any], list[str]]:
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    seat = world.raw_seat(world.step_id(wf), "reviewer", "")
    task = world.enter(wf, "E2")
    fields = {
        "task_id": task.id,
        "step_id": world.step_id(wf),
        "participant_id": seat,
        "agent_profile_id": "",
    }
    return "ERROR", fields, ["cause"]


def _c2(world: World) -> tuple[str, dict[str, Any], list[str]]:
    wf = world.flow([act("clear_decisions")])

    def broken(*_args: Any) -> int:
        raise RuntimeError("decision store unavailable")

    world.host.decisions.clear = broken  # type: ignore[method-assign]
    task = world.enter(wf, "E2")
    fields = {"workflow_id": wf.id, "step_id": world.step_id(wf), "task_id": task.id}
    return "ERROR", fields, ["cause"]


def _c3(world: World) -> tuple[str, dict[str, Any], list[str]]:
    wf = world.flow([act("queue_run", target="participant_role:approver")])
    world.enter(wf, "E2")
    fields = {"workflow_id": wf.id, "step_id": world.step_id(wf), "action_type": "queue_run"}
    return "ERROR", fields, ["cause"]


def _e1(world: World) -> tuple[str, dict[str, Any], list[str]]:
    wf = world.flow([act("queue_run_for_each_participant", role="approver")])
    world.enter(wf, "E2")
    fields = {"step_id": world.step_id(wf), "step_name": "Target", "role": "approver"}
    return "WARNING", fields, []


def _e3(world: World) -> tuple[str, dict[str, Any], list[str]]:
    world.host.set_plugins(allow={"kanban", "t"})
    wf = world.flow([act("queue_run_for_each_participant", reason="r")])
    world.host.set_plugins(allow={"kanban", "office", "t"})
    world.enter(wf, "E2")
    return "ERROR", {"workflow_id": wf.id, "step_id": world.step_id(wf)}, []


SCENARIOS: dict[str, Scenario] = {
    "AC-A6-unrecognised": _a6_unrecognised,
    "AC-A6-no_executor": _a6_no_executor,
    "AC-A6-configure_session-E4": _a6_configure_on_e4,
    "AC-C1": _c1,
    "AC-C2": _c2,
    "AC-C3": _c3,
    "AC-E1": _e1,
    "AC-E3": _e3,
}


@pytest.mark.parametrize("criterion", list(SCENARIOS))
def test_ac_g2_diagnostics_carry_their_fields_as_discrete_fields(
    world: World, criterion: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-G2: every diagnostic required by AC-A6, AC-C1, AC-C2, AC-C3, AC-E1 and AC-E3 is a
    structured record carrying the identifying fields its criterion names as discrete fields
    (with the right values), not interpolated into the message string."""
    laneway_logs.clear()
    level, fields, present = SCENARIOS[criterion](world)
    (record,) = problems(laneway_logs)
    assert record["level"] == level
    assert_discrete(record, fields)
    for name in present:
        assert record["extra"].get(name), (name, record["extra"])
