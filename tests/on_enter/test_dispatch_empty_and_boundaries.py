"""spec/on-enter-action-dispatch, group E (empty, nil and boundary behaviour): AC-E1 ... AC-E5,
with the AC-G1/AC-G2 accounting their records carry, and the "Allocation inputs" negative (a
session-only step allocates no record on any entry site)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.on_enter.helpers import (
    PATHS,
    World,
    act,
    assert_discrete,
    cause_of,
    fan_out_infos,
    open_world,
    problems,
    records,
)


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


# -- AC-E1 -----------------------------------------------------------------------------------------


def test_ac_e1_fan_out_matching_nobody_warns_and_does_not_fail(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E1: zero matching participants (only other roles are seated): no runs, the entry
    does not fail (marker done, entry terminal, later actions run), and one WARNING names step
    id, step name and configured role as discrete fields (AC-G2)."""
    wf = world.flow(
        [act("queue_run_for_each_participant", role="reviewer"), act("run_code_review")]
    )
    world.seat(wf, "approver", "appr")
    task = world.place(wf, "E2")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    assert world.runs(task.id) == []
    assert len(world.reviews(task.id)) == 1
    ((entry, markers),) = world.entries(task.id)
    assert [m.state for m in markers] == ["done", "done"]
    assert entry.terminal is True
    (warning,) = problems(laneway_logs)
    assert warning["level"] == "WARNING"
    assert_discrete(
        warning, {"step_id": world.step_id(wf), "step_name": "Target", "role": "reviewer"}
    )


# -- AC-E2 -----------------------------------------------------------------------------------------


def test_ac_e2_participant_without_agent_profile_is_a_counted_failure(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E2 accounting (Verification): three matching participants, one with an empty
    agent_profile_id: one AC-C1 ERROR for it, the others get their runs, one AC-G1 INFO with
    matching=3 and enqueued=2, and a failed(cause) marker counting it (attempted=3,
    failed=1, its cause first)."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    target = world.step_id(wf)
    world.seat(wf, "reviewer", "r1", position=0)
    empty = world.raw_seat(target, "reviewer", "", position=1)
    world.seat(wf, "reviewer", "r3", position=2)
    task = world.place(wf, "E2")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    assert sorted(r.agent_profile_id for r in world.runs(task.id)) == sorted(
        [world.profile("r1").id, world.profile("r3").id]
    )
    (error,) = records(laneway_logs, "ERROR")
    assert_discrete(
        error,
        {"task_id": task.id, "step_id": target, "participant_id": empty, "agent_profile_id": ""},
    )
    (info,) = fan_out_infos(laneway_logs, task.id)
    assert (info["extra"]["matching"], info["extra"]["enqueued"], info["extra"]["suppressed"]) == (
        3,
        2,
        0,
    )
    marker = world.markers(task.id)[0]
    assert marker.state == "failed"
    cause = cause_of(marker)
    assert (cause["attempted"], cause["failed"], cause["first_cause"]) == (
        3,
        1,
        error["extra"]["cause"],
    )


def test_ac_e2_every_participant_without_a_profile_fails_terminally(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E2, the all-empty case: no runs, one ERROR per (de-duplicated) participant, the
    AC-G1 INFO with enqueued=0, the action marked failed and the entry terminal, so the
    recovery scan (which reads non-terminal entries) never resumes it."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    target = world.step_id(wf)
    world.raw_seat(target, "reviewer", "", position=0)
    task = world.place(wf, "E2")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    assert world.runs(task.id) == []
    assert len(records(laneway_logs, "ERROR")) == 1
    (info,) = fan_out_infos(laneway_logs, task.id)
    assert (info["extra"]["matching"], info["extra"]["enqueued"]) == (1, 0)
    ((entry, markers),) = world.entries(task.id)
    assert [m.state for m in markers] == ["failed"]
    assert cause_of(markers[0])["failed"] == 1
    assert entry.terminal is True
    assert world.host.entries.list(task=task.id, non_terminal=True) == []


# -- AC-E3 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [{}, {"role": ""}], ids=["absent", "empty"])
def test_ac_e3_fan_out_without_a_role_enqueues_nothing_and_errors(
    world: World, config: dict[str, Any], laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E3: queue_run_for_each_participant with an empty or absent role enqueues no runs
    (it is not "all roles": every role is seated), marks the position skipped(malformed), and
    one ERROR names workflow id and step id as discrete fields (AC-G2). The declaration is
    imported while Office is not loaded (import applies the loaded plugins' validators only,
    and Office's refuses it), then Office is loaded."""
    world.host.set_plugins(allow={"kanban", "t"})
    wf = world.flow([act("queue_run_for_each_participant", **config), act("run_code_review")])
    world.host.set_plugins(allow={"kanban", "office", "t"})
    for role in ("reviewer", "approver", "watcher", "collaborator", "runner"):
        world.seat(wf, role, f"p-{role}")
    task = world.place(wf, "E2")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    assert world.runs(task.id) == []
    assert len(world.reviews(task.id)) == 1  # the entry went on
    marker = world.markers(task.id)[0]
    assert (marker.state, marker.reason) == ("skipped", "malformed")
    (error,) = problems(laneway_logs)
    assert error["level"] == "ERROR"
    assert_discrete(error, {"workflow_id": wf.id, "step_id": world.step_id(wf)})


# -- AC-E4 -----------------------------------------------------------------------------------------


def test_ac_e4_clear_with_no_decisions_is_a_successful_no_op(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E4: clear_decisions against a (task, step) with no decisions completes as a no-op
    and records its completion marker; the actions after it run."""
    wf = world.flow(
        [act("clear_decisions"), act("queue_run_for_each_participant", role="reviewer")]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E2")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    markers = world.markers(task.id)
    assert (markers[0].kind, markers[0].state) == ("clear_decisions", "done")
    assert len(world.runs(task.id)) == 1
    assert problems(laneway_logs) == []


# -- AC-E5 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("declared", ["absent", "empty", "session_only"])
@pytest.mark.parametrize("path", PATHS)
def test_ac_e5_no_record_for_a_step_without_durable_actions(
    world: World, path: str, declared: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E5 / Allocation inputs: a step whose on_enter is absent, empty, or declares only
    session kinds allocates no entry record on any entry site, and behaves as before (the
    session kinds still take effect, nothing warns)."""
    on_enter = {
        "absent": None,
        "empty": [],
        "session_only": [act("reset_agent_context"), act("set_session_mode", mode="m")],
    }[declared]
    wf = world.flow(on_enter)
    task = world.place(wf, path)
    laneway_logs.clear()
    world.arrive(wf, task.id, path)
    assert world.entries(task.id) == []
    assert problems(laneway_logs) == []
    if declared == "session_only":
        assert world.meta(task.id)["session_mode"] == "m"


def test_ac_e5_a_durable_declaration_needs_a_record_even_if_every_action_skips(
    world: World,
) -> None:
    """AC-E5: a non-empty list with at least one engine-owned action requires a record even
    when every action in it turns out to be skipped."""
    wf = world.flow([act("frobnicate")])
    world.host.set_features(office=False)
    wf2 = world.flow([act("clear_decisions")])
    for flow in (wf, wf2):
        task = world.enter(flow, "E2")
        ((entry, markers),) = world.entries(task.id)
        assert entry.terminal is True
        assert [m.state for m in markers] == ["skipped"]
