"""spec/on-enter-action-dispatch, group D (non-regression): AC-D1 ... AC-D4.

AC-D1's list names Go-side session mechanics (agent-profile switching, ACP vs passthrough
prompt delivery, queued-message drain) that laneway's session kinds express as recorded
effects; what is asserted is the observable part laneway has: each session kind takes effect
once, in today's order (reset first, configure second, auto-start last), with the prompt built
as before, and a session-only step allocates no ledger record.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.on_enter.helpers import (
    HOISTING_PATHS,
    PATHS,
    Timeline,
    World,
    act,
    open_world,
    problems,
    records,
)

RULES = [{"agent_name": "claude", "operation": "keep"}]
SESSION_ONLY = [
    act("auto_start_agent"),
    act("set_session_mode", mode="plan"),
    act("reset_agent_context"),
    act("configure_session", rules=RULES),
    act("enable_plan_mode"),
    act("set_workflow_data", key="k", value="v"),
]


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


# -- AC-D1 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_ac_d1_session_only_step_behaves_as_before(
    world: World, path: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-D1: a step declaring only the session kinds: each fires exactly once (AC-A11),
    reset before configure before the rest, auto-start last (E1-E3/E5); declared order on E4,
    where configure_session has no owner (AC-A2(i)); no ledger record (AC-E5, AC-B8)."""
    wf = world.flow(SESSION_ONLY)
    timeline = Timeline().install(world.host)
    task = world.place(wf, path)
    laneway_logs.clear()
    world.arrive(wf, task.id, path)
    if path == "E4":
        assert timeline.of(task.id) == [
            "auto_start_agent",
            "set_session_mode:plan",
            "reset_agent_context",
            "enable_plan_mode",
            "set_workflow_data",
        ]
        assert [r["extra"]["action_type"] for r in problems(laneway_logs)] == ["configure_session"]
    else:
        assert timeline.of(task.id) == [
            "reset_agent_context",
            "configure_session",
            "set_session_mode:plan",
            "enable_plan_mode",
            "set_workflow_data",
            "auto_start_agent",
        ]
        assert problems(laneway_logs) == []
    assert world.entries(task.id) == []


def test_ac_d1_auto_start_delivers_the_step_prompt_once(world: World) -> None:
    """AC-D1: auto_start_agent delivers the prompt built as today (the step prompt with
    {{task_prompt}} replaced by the task description), once per entry."""
    (wf, _away) = world.import_doc(
        [
            {
                "name": "Prompted",
                "steps": [
                    {
                        "name": "Src",
                        "position": 0,
                        "events": {"on_turn_complete": [act("move_to_step", step_position=1)]},
                    },
                    {
                        "name": "Target",
                        "position": 1,
                        "prompt": "Review this: {{task_prompt}}",
                        "events": {"on_enter": [act("auto_start_agent")]},
                    },
                ],
            },
            {"name": "Prompted-away", "steps": [{"name": "Away", "position": 0}]},
        ]
    )
    task = world.host.tasks.create(workflow=wf.id, title="t", description="the diff", step="Src")
    world.host.sessions.start(task.id)
    world.host.turns.complete(task.id)
    assert world.meta(task.id)["prompts"] == [
        {"step_id": world.step_id(wf), "prompt": "Review this: the diff"}
    ]


# -- AC-D2 -----------------------------------------------------------------------------------------

OFFICE_KINDS = [
    "clear_decisions",
    "queue_run_for_each_participant",
    "queue_run",
    "run_code_review",
    "ensure_participant_seat",
]


@pytest.mark.parametrize("office", ["feature_off", "plugin_blocked"])
@pytest.mark.parametrize("path", HOISTING_PATHS)
def test_ac_d2_office_off_kanban_unchanged_office_kinds_warn(
    world: World, office: str, path: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-D2: with Office off (features.office false) or its plugin not loaded, a step
    declaring kanban and office-only on_enter actions: the kanban ones behave as before, each
    office-only one produces the AC-A6 warning (skipped(no_executor) / skipped(unrecognised))
    and not an error; the transition commits, the entry is terminal (no stall), and the task
    moves on normally afterwards."""
    appr = world.profile("appr")
    wf = world.flow(
        [
            act("reset_agent_context"),
            act("clear_decisions"),
            act("queue_run_for_each_participant", role="reviewer"),
            act("queue_run", target="primary"),
            act("run_code_review"),
            act("ensure_participant_seat", role="approver", agent_profile_id=appr.id),
            act("set_session_mode", mode="m"),
            act("auto_start_agent"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, path)
    if office == "feature_off":
        world.host.set_features(office=False)
    else:
        world.host.set_plugins(allow={"kanban", "t"})
    laneway_logs.clear()
    world.arrive(wf, task.id, path)

    reason = "no_executor" if office == "feature_off" else "unrecognised"
    warned = [r["extra"]["action_type"] for r in records(laneway_logs, "WARNING")]
    assert sorted(warned) == sorted(OFFICE_KINDS)
    assert records(laneway_logs, "ERROR") == []
    ((entry, markers),) = world.entries(task.id)
    assert {(m.state, m.reason) for m in markers} == {("skipped", reason)}
    assert entry.terminal is True
    meta = world.meta(task.id)
    assert (len(meta["context_resets"]), meta["session_mode"], len(meta["prompts"])) == (1, "m", 1)
    assert world.runs(task.id) == []
    assert world.host.tasks.get(task.id).workflow_step_id == world.step_id(wf)
    world.host.tasks.move(task.id, "Out")  # and the card is not stuck
    assert world.host.tasks.get(task.id).workflow_step_id == world.step_id(wf, "Out")


def test_ac_d2_shipped_kanban_template_runs_unchanged_with_office_off(world: World) -> None:
    """AC-D2: the shipped kanban template's own on_enter actions behave the same with Office
    switched off as with it on."""
    effects: dict[bool, list[str]] = {}
    for office in (True, False):
        world.host.set_features(office=office)
        wf = world.host.workflows.create_from_template("simple", name=f"kanban-{office}")
        timeline = Timeline().install(world.host)
        task = world.host.tasks.create(workflow=wf.id, title=f"t{office}", step="Backlog")
        world.host.sessions.start(task.id)
        for step in sorted(wf.steps, key=lambda s: s.position)[1:]:
            world.host.tasks.move(task.id, step.id)
        effects[office] = timeline.of(task.id)
        assert world.runs(task.id) == []
        assert world.entries(task.id) == []
    assert effects[True] == effects[False] == ["auto_start_agent"]


# -- AC-D3 / AC-D4 ---------------------------------------------------------------------------------


def _office_default(world: World) -> tuple[Any, Any, str, str]:
    wf = world.host.workflows.create_from_template("office-default")
    world.profile("worker")
    rev = world.profile("reviewer-1")
    seat = world.host.participants.add(
        step="Review", role="reviewer", profile=rev.id, workflow=wf.id
    )
    task = world.host.tasks.create(workflow=wf.id, title="Git sync")
    world.host.sessions.start(task.id, profile="worker")
    return wf, task, rev.id, seat.id


def test_ac_d3_single_reviewer_regression_through_on_turn_complete(world: World) -> None:
    """AC-D3 (the named regression test): a task entering a step whose on_enter declares
    queue_run_for_each_participant{role: reviewer} with exactly one reviewer attached,
    arriving through an ordinary on_turn_complete transition (Office Default, Work -> Review),
    produces exactly one queued run, for that reviewer's profile, with the configured
    reason."""
    wf, task, rev, _seat = _office_default(world)
    result = world.host.turns.complete(task.id)
    review = wf.step("Review")
    assert (result["transitioned"], result["to_step_id"]) == (True, review.id)
    (run,) = world.runs(task.id)
    assert (run.agent_profile_id, run.reason, run.status, run.workflow_step_id) == (
        rev,
        "review_started",
        "queued",
        review.id,
    )


def test_ac_d4_rejection_round_produces_a_further_run(world: World) -> None:
    """AC-D4: after a rejection round (reviewer rejects -> back to Work -> turn complete ->
    Review again), the second entry into Review produces a further run for the same reviewer,
    inside the 24-hour window."""
    wf, task, rev, seat = _office_default(world)
    world.host.turns.complete(task.id)
    decided = world.host.decisions.record(task.id, "Review", seat, "rejected")
    assert decided["to_step_id"] == wf.step("Work").id
    world.host.turns.complete(task.id)
    assert world.host.tasks.get(task.id).workflow_step_id == wf.step("Review").id
    runs = world.runs(task.id)
    assert [(r.agent_profile_id, r.reason, r.status) for r in runs] == [
        (rev, "review_started", "queued")
    ] * 2
    assert world.decision_ids(task.id, wf.step("Review").id) == []  # fresh round
    # and the fresh round can pass: the reviewer's approval releases the card
    world.host.decisions.record(task.id, "Review", seat, "approved")
    assert world.host.tasks.get(task.id).workflow_step_id == wf.step("Approval").id
