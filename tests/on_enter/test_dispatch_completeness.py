"""spec/on-enter-action-dispatch, group A (dispatch completeness): AC-A1 ... AC-A13.

Every arrival is driven through a real entry point (turn complete, move, WIP promotion,
switch_workflow, task update, task start); effects are asserted where they land: runs rows,
decision rows, task_review_runs rows, per-task seats, session metadata, entry markers, and the
order in which the host's services were asked to apply them (`Timeline`).

In laneway the spec's two dispatchers are one (`core.entry`): "owner" is a property of the kind
(session kinds vs durable kinds), so AC-A11/AC-A13's "executed by exactly one component" is
asserted as "takes effect exactly once per entry, on every path".
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
    assert_discrete,
    entry_path,
    open_world,
    problems,
    records,
)

RULES = [{"agent_name": "claude", "operation": "set", "model": "opus"}]


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


# -- AC-A1 -----------------------------------------------------------------------------------------


def test_ac_a1_every_declared_action_runs_once_in_declared_order(world: World) -> None:
    """AC-A1: every on_enter action declared on the destination step runs, in declared order,
    exactly once, on an ordinary transition (E1, on_turn_complete)."""
    rev, boss = world.profile("rev"), world.profile("boss")
    wf = world.flow(
        [
            act("ensure_participant_seat", role="reviewer", agent_profile_id=rev.id),
            act("clear_decisions"),
            act("queue_run_for_each_participant", role="reviewer", reason="fan"),
            act("run_code_review"),
            act("queue_run", target=f"agent_profile_id:{boss.id}", reason="bare"),
        ]
    )
    timeline = Timeline().install(world.host)
    task = world.enter(wf, "E1")
    assert timeline.of(task.id) == [
        "ensure_participant_seat",
        "clear_decisions",
        "enqueue:fan",
        "run_code_review",
        "enqueue:bare",
    ]
    runs = world.runs(task.id)
    assert sorted((r.agent_profile_id, r.reason) for r in runs) == sorted(
        [(rev.id, "fan"), (boss.id, "bare")]
    )
    assert len(world.reviews(task.id)) == 1
    (entry, markers) = world.entries(task.id)[0]
    assert entry.terminal is True
    assert [(m.position, m.kind, m.state) for m in markers] == [
        (0, "ensure_participant_seat", "done"),
        (1, "clear_decisions", "done"),
        (2, "queue_run_for_each_participant", "done"),
        (3, "run_code_review", "done"),
        (4, "queue_run", "done"),
    ]


# -- AC-A2 -----------------------------------------------------------------------------------------


def _full_declaration(world: World) -> list[dict[str, Any]]:
    appr, boss = world.profile("appr"), world.profile("boss")
    return [
        act("reset_agent_context"),
        act("configure_session", rules=RULES),
        act("enable_plan_mode"),
        act("set_session_mode", mode="plan"),
        act("set_workflow_data", key="k", value="v"),
        act("clear_decisions"),
        act("ensure_participant_seat", role="approver", agent_profile_id=appr.id),
        act("queue_run_for_each_participant", role="reviewer"),
        act("queue_run", target=f"agent_profile_id:{boss.id}", reason="bare"),
        act("run_code_review"),
        act("auto_start_agent"),
    ]


ALL_LABELS = {
    "reset_agent_context",
    "configure_session",
    "enable_plan_mode",
    "set_session_mode:plan",
    "set_workflow_data",
    "clear_decisions",
    "ensure_participant_seat",
    "enqueue:on_enter",
    "enqueue:bare",
    "run_code_review",
    "auto_start_agent",
}


@pytest.mark.parametrize("path", PATHS)
def test_ac_a2_same_action_coverage_on_every_entry_path(
    world: World, path: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A2 (Verification: "the coverage assertion executed once per entry path E1-E5", E5's
    two sites separately): a step declaring all ten kinds executes every one of them on every
    path; the single named exemption is configure_session on E4 (AC-A2(i)), which warns.
    Ordering is deliberately not compared across paths (AC-A2(ii)). The entry record is
    allocated on every path, with that path (AC-B7 per site)."""
    wf = world.flow(_full_declaration(world))
    world.seat(wf, "reviewer", "rev")
    target = world.step_id(wf)
    task = world.place(wf, path)
    seeded = world.add_decision(task.id, target)
    timeline = Timeline().install(world.host)
    world.arrive(wf, task.id, path)

    expected = ALL_LABELS - ({"configure_session"} if path == "E4" else set())
    assert set(timeline.of(task.id)) == expected
    assert len(timeline.of(task.id)) == len(expected)  # each exactly once
    # the durable effects, where they land
    assert seeded not in world.decision_ids(task.id, target)
    assert sorted(r.reason for r in world.runs(task.id)) == ["bare", "on_enter"]
    assert [r["workflow_step_id"] for r in world.reviews(task.id)] == [target]
    assert [tuple(s) for s in world.task_seats(task.id, target)] == [
        ("approver", world.profile("appr").id)
    ]
    # the session effects
    meta = world.meta(task.id)
    assert meta["plan_mode"] is True
    assert meta["session_mode"] == "plan"
    assert meta["workflow_data"] == {"k": "v"}
    assert len(meta["context_resets"]) == 1
    assert len(meta["prompts"]) == 1
    assert ("configured" in meta) is (path != "E4")
    # one entry record, for this path, every durable position done
    ((entry, markers),) = world.entries(task.id)
    assert (entry.step_id, entry.entry_seq, entry.entry_path, entry.terminal) == (
        target,
        1,
        entry_path(path),
        True,
    )
    assert {m.kind for m in markers} == {
        "clear_decisions",
        "ensure_participant_seat",
        "queue_run_for_each_participant",
        "queue_run",
        "run_code_review",
    }
    assert {m.state for m in markers} == {"done"}
    # no path discards silently: the only problem record is E4's configure_session warning
    got = [(r["level"], r["extra"].get("action_type")) for r in problems(laneway_logs)]
    assert got == ([("WARNING", "configure_session")] if path == "E4" else [])


# -- AC-A3 -----------------------------------------------------------------------------------------


def test_ac_a3_clear_deletes_the_destination_decisions_before_later_actions(world: World) -> None:
    """AC-A3: every decision of (entering task, destination step) is deleted before any action
    declared after clear_decisions runs; the decisions of the step being left are kept."""
    wf = world.flow(
        [act("clear_decisions"), act("queue_run_for_each_participant", role="reviewer")]
    )
    world.seat(wf, "reviewer", "rev")
    target, src = world.step_id(wf), world.step_id(wf, "Src")
    task = world.place(wf, "E1")
    at_target = [world.add_decision(task.id, target) for _ in range(2)]
    at_src = world.add_decision(task.id, src)
    other = world.place(wf, "E2", title="other")  # another task's decision at the same step
    other_decision = world.add_decision(other.id, target)

    seen_at_enqueue: list[list[str]] = []
    enqueue = world.host.runs.enqueue

    def spy(request: Any) -> Any:
        seen_at_enqueue.append(world.decision_ids(task.id, target))
        return enqueue(request)

    world.host.runs.enqueue = spy  # type: ignore[method-assign]
    world.arrive(wf, task.id, "E1")
    assert seen_at_enqueue == [[]]  # the clear had committed before the fan-out enqueued
    assert not set(at_target) & set(world.decision_ids(task.id, target))
    assert world.decision_ids(task.id, src) == [at_src]
    assert world.decision_ids(other.id, target) == [other_decision]


# -- AC-A4 / AC-A5 ---------------------------------------------------------------------------------


def test_ac_a4_one_run_per_participant_of_the_role_and_none_for_other_roles(
    world: World,
) -> None:
    """AC-A4: exactly one run for each distinct participant whose role is R; none for others."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer", reason="review")])
    world.seat(wf, "reviewer", "r1")
    world.seat(wf, "reviewer", "r2", position=1)
    world.seat(wf, "approver", "a1")
    world.seat(wf, "watcher", "w1")
    task = world.enter(wf, "E2")
    runs = world.runs(task.id)
    assert sorted(r.agent_profile_id for r in runs) == sorted(
        [world.profile("r1").id, world.profile("r2").id]
    )
    assert {(r.reason, r.workflow_step_id, r.status) for r in runs} == {
        ("review", world.step_id(wf), "queued")
    }


def test_ac_a5_merged_deduplicated_participant_set_in_role_position_id_order(
    world: World,
) -> None:
    """AC-A5: template and per-task seats merged (per-task wins a (role, agent) collision),
    enumerated role, position, id; de-duplicated on (role, agent) keeping the first; runs are
    enqueued in that order."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    task = world.place(wf, "E2")
    world.seat(wf, "reviewer", "r1", position=0)  # template, overridden by the task's own
    world.seat(wf, "reviewer", "r2", position=1)
    world.seat(wf, "reviewer", "r1", position=2, task=task.id)  # per-task wins: position 2
    world.seat(wf, "reviewer", "r3", position=3)
    world.seat(wf, "reviewer", "r3", position=4)  # same tier duplicate: de-duplicated
    world.seat(wf, "approver", "a1", position=0)
    timeline = Timeline().install(world.host)
    world.arrive(wf, task.id, "E2")
    order = [r.agent_profile_id for r in timeline.requests]
    assert order == [world.profile(n).id for n in ("r2", "r1", "r3")]
    assert len(world.runs(task.id)) == 3


# -- AC-A6 -----------------------------------------------------------------------------------------


def test_ac_a6_unrecognised_kind_warns_is_skipped_and_the_rest_continue(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A6(a): a kind nobody declares reaches no executor: one WARNING naming workflow id,
    step id, step name and action type (discrete fields, AC-G2); marker skipped(unrecognised)
    (AC-B5(b)); the remaining actions still run."""
    wf = world.flow([act("frobnicate"), act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "rev")
    task = world.enter(wf, "E2")
    target = world.step_id(wf)
    (warning,) = records(laneway_logs, "WARNING", action_type="frobnicate")
    assert_discrete(
        warning,
        {"workflow_id": wf.id, "step_id": target, "step_name": "Target", "task_id": task.id},
    )
    markers = world.markers(task.id)
    assert (markers[0].state, markers[0].reason) == ("skipped", "unrecognised")
    assert markers[1].state == "done"
    assert len(world.runs(task.id)) == 1
    assert records(laneway_logs, "ERROR") == []


def test_ac_a6_no_executor_with_office_off_warns_and_the_rest_continue(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A6(b) / AC-D2: Office switched off, its kinds are recognised but have no executor:
    WARNING naming workflow id, step id, step name and action type; marker
    skipped(no_executor); the transition stands and the remaining actions still run."""
    wf = world.flow(
        [act("clear_decisions"), act("set_session_mode", mode="m"), act("t_probe")],
    )
    task = world.place(wf, "E2")
    world.host.set_features(office=False)
    world.arrive(wf, task.id, "E2")
    target = world.step_id(wf)
    (warning,) = records(laneway_logs, "WARNING", action_type="clear_decisions")
    assert_discrete(warning, {"workflow_id": wf.id, "step_id": target, "step_name": "Target"})
    markers = world.markers(task.id)
    assert (markers[0].state, markers[0].reason) == ("skipped", "no_executor")
    assert markers[2].state == "done"
    assert [p["position"] for p in world.plugin.seen] == [2]
    assert world.meta(task.id)["session_mode"] == "m"
    assert records(laneway_logs, "ERROR") == []


@pytest.mark.parametrize("path", PATHS)
def test_ac_a6_configure_session_warns_on_e4_only_and_reset_never_warns(
    world: World, path: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A6 per-path candidacy: configure_session has an owner on E1-E3/E5 (runs, no warning)
    and none on E4 (one WARNING that also names the entry path); reset_agent_context has an
    owner everywhere and never warns."""
    wf = world.flow(
        [
            act("configure_session", rules=RULES),
            act("reset_agent_context"),
            act("clear_decisions"),
        ]
    )
    task = world.place(wf, path)
    laneway_logs.clear()
    world.arrive(wf, task.id, path)
    meta = world.meta(task.id)
    assert len(meta["context_resets"]) == 1
    assert records(laneway_logs, "WARNING", action_type="reset_agent_context") == []
    if path == "E4":
        (warning,) = problems(laneway_logs)
        assert warning["level"] == "WARNING"
        assert_discrete(
            warning,
            {
                "workflow_id": wf.id,
                "step_id": world.step_id(wf),
                "step_name": "Target",
                "action_type": "configure_session",
                "entry_path": "E4",
            },
        )
        assert "configured" not in meta
    else:
        assert problems(laneway_logs) == []
        assert meta["configured"] == [{**RULES[0], "config_options": {}}]


# -- AC-A7 -----------------------------------------------------------------------------------------


def test_ac_a7_queue_run_on_enter_keys_differ_across_entries_and_are_coalesce_exempt(
    world: World,
) -> None:
    """AC-A7 (+AC-B1, AC-H9 for queue_run): entered through on_turn_complete, queue_run
    enqueues one run against its resolved target carrying the entry-scoped key and the
    coalescing exclusion; a second entry of the same step within seconds enqueues a second
    run (its key differs), not coalesced into the first, still-queued one."""
    wf = world.flow([act("queue_run", target="participant_role:reviewer", reason="nudge")])
    world.seat(wf, "reviewer", "rev")
    task = world.enter(wf, "E1")
    world.host.turns.complete(task.id)  # Target -> Src (E1)
    world.arrive(wf, task.id, "E1")  # Src -> Target again: a second entry
    runs = world.runs(task.id)
    assert [(r.agent_profile_id, r.reason, r.status) for r in runs] == [
        (world.profile("rev").id, "nudge", "queued")
    ] * 2
    assert all(r.workflow_step_id == world.step_id(wf) for r in runs)
    assert all(r.coalesce_exempt is True and r.coalesced_count == 1 for r in runs)
    keys = [r.idempotency_key for r in runs]
    assert None not in keys
    assert keys[0] != keys[1]
    assert [e.entry_seq for e, _ in world.entries(task.id)] == [1, 2]


@pytest.mark.parametrize(
    "target", ["primary", "workspace.ceo_agent", "agent_profile_id", "participant_role"]
)
def test_ac_a7_queue_run_uses_the_engine_target_resolution(world: World, target: str) -> None:
    """AC-A7: the same target resolution as queue_run under any other trigger: primary (the
    step's runner seat), workspace.ceo_agent, participant_role:<role>, agent_profile_id:<id>."""
    agent = world.host.profiles.add("chosen", command=["true"], role="ceo")
    spec = {
        "primary": "primary",
        "workspace.ceo_agent": "workspace.ceo_agent",
        "agent_profile_id": f"agent_profile_id:{agent.id}",
        "participant_role": "participant_role:approver",
    }[target]
    wf = world.flow([act("queue_run", target=spec)])
    if target == "primary":
        world.seat(wf, "runner", "chosen")
    if target == "participant_role":
        world.seat(wf, "approver", "chosen")
    task = world.enter(wf, "E2")
    assert [(r.agent_profile_id, r.reason) for r in world.runs(task.id)] == [(agent.id, "on_enter")]
    assert world.markers(task.id)[0].state == "done"


# -- AC-A8 -----------------------------------------------------------------------------------------


def test_ac_a8_run_code_review_starts_a_review_pass(world: World) -> None:
    """AC-A8: a task_review_runs row with the entering task, the destination step as
    workflow_step_id, and trigger workflow_step."""
    wf = world.flow([act("run_code_review")])
    task = world.enter(wf, "E1")
    (review,) = world.reviews(task.id)
    assert (review["task_id"], review["workflow_step_id"], review["trigger"]) == (
        task.id,
        world.step_id(wf),
        "workflow_step",
    )
    assert world.markers(task.id)[0].state == "done"


def test_ac_a8_a_failed_start_does_not_block_the_entry(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A8: a launch forced to fail neither fails the action nor blocks the entry: the
    entry completes and the actions declared after it run."""
    wf = world.flow(
        [act("run_code_review"), act("queue_run_for_each_participant", role="reviewer")]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E2")

    def broken(*_args: Any) -> str:
        raise RuntimeError("review service down")

    world.host.runs.start_review = broken  # type: ignore[method-assign]
    world.arrive(wf, task.id, "E2")
    assert world.reviews(task.id) == []
    assert len(world.runs(task.id)) == 1
    ((entry, markers),) = world.entries(task.id)
    assert entry.terminal is True
    assert [m.state for m in markers] == ["done", "done"]
    assert world.host.tasks.get(task.id).workflow_step_id == world.step_id(wf)


# -- AC-A9 / AC-A2(ii) / AC-A13 --------------------------------------------------------------------

HOIST_DECL = [
    act("auto_start_agent"),
    act("clear_decisions"),
    act("reset_agent_context"),
    act("configure_session", rules=RULES),
    act("queue_run_for_each_participant", role="reviewer"),
    act("set_session_mode", mode="m"),
]
HOISTED = [
    "reset_agent_context",
    "configure_session",
    "clear_decisions",
    "enqueue:on_enter",
    "set_session_mode:m",
    "auto_start_agent",
]
DECLARED_E4 = [
    "auto_start_agent",
    "clear_decisions",
    "reset_agent_context",
    "enqueue:on_enter",
    "set_session_mode:m",
]


@pytest.mark.parametrize("path", HOISTING_PATHS)
def test_ac_a9_fixed_positions_on_e1_e3_and_e5(world: World, path: str) -> None:
    """AC-A9: with clear_decisions declared before reset_agent_context and auto_start_agent
    before clear_decisions, on E1-E3/E5 reset runs first, configure_session second, the agent
    starts last, and the rest keep declared order among themselves."""
    wf = world.flow(HOIST_DECL)
    world.seat(wf, "reviewer", "rev")
    timeline = Timeline().install(world.host)
    task = world.enter(wf, path)
    assert timeline.of(task.id) == HOISTED


def test_ac_a2_ii_and_ac_a13_same_declaration_e1_hoisted_e4_declared_order(
    world: World,
) -> None:
    """AC-A2(ii) + AC-A13 (+AC-A9 on E4): the identical declared list driven through E1 and
    E4: the same coverage (bar configure_session, AC-A2(i)), and explicitly different orders:
    hoisted on E1, declared order on E4."""
    wf = world.flow(HOIST_DECL)
    world.seat(wf, "reviewer", "rev")
    timeline = Timeline().install(world.host)
    by_e1 = world.enter(wf, "E1", title="e1")
    world.host.tasks.move(by_e1.id, "Out")  # frees Target (wip_limit 1)
    by_e4 = world.enter(wf, "E4", title="e4")
    assert timeline.of(by_e1.id) == HOISTED
    assert timeline.of(by_e4.id) == DECLARED_E4
    assert set(timeline.of(by_e1.id)) - set(timeline.of(by_e4.id)) == {"configure_session"}
    assert timeline.of(by_e1.id) != timeline.of(by_e4.id)


def test_ac_a13_switch_workflow_runs_the_four_session_kinds(world: World) -> None:
    """AC-A13: switch_workflow (E4) into a step declaring enable_plan_mode,
    reset_agent_context, set_session_mode and auto_start_agent: all four take effect on that
    path, in declared order (no hoisting on E4)."""
    wf = world.flow(
        [
            act("enable_plan_mode"),
            act("reset_agent_context"),
            act("set_session_mode", mode="review"),
            act("auto_start_agent"),
        ]
    )
    timeline = Timeline().install(world.host)
    task = world.enter(wf, "E4")
    assert timeline.of(task.id) == [
        "enable_plan_mode",
        "reset_agent_context",
        "set_session_mode:review",
        "auto_start_agent",
    ]
    meta = world.meta(task.id)
    assert meta["plan_mode"] is True
    assert meta["session_mode"] == "review"
    assert meta["context_resets"] == [{"step_id": world.step_id(wf), "entry_path": "E4"}]
    assert [p["step_id"] for p in meta["prompts"]] == [world.step_id(wf)]


# -- AC-A10 ----------------------------------------------------------------------------------------


def test_ac_a10_manual_move_without_a_session_still_fans_out(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A10: a manual move (E2) of a task with no running session into a step declaring the
    five durable kinds executes all of them; the session kinds stay skipped, silently."""
    appr, boss = world.profile("appr"), world.profile("boss")
    wf = world.flow(
        [
            act("reset_agent_context"),
            act("clear_decisions"),
            act("ensure_participant_seat", role="approver", agent_profile_id=appr.id),
            act("queue_run_for_each_participant", role="reviewer"),
            act("queue_run", target=f"agent_profile_id:{boss.id}"),
            act("run_code_review"),
            act("set_session_mode", mode="m"),
            act("auto_start_agent"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E2", session=False)
    seeded = world.add_decision(task.id, world.step_id(wf))
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    assert world.host.sessions.live(task.id) is None
    assert world.decision_ids(task.id, world.step_id(wf)) == []
    assert seeded
    assert sorted(r.agent_profile_id for r in world.runs(task.id)) == sorted(
        [world.profile("rev").id, boss.id]
    )
    assert len(world.reviews(task.id)) == 1
    assert len(world.task_seats(task.id, world.step_id(wf))) == 1
    assert {m.state for m in world.markers(task.id).values()} == {"done"}
    assert problems(laneway_logs) == []


# -- AC-A11 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_ac_a11_each_session_action_takes_effect_exactly_once(world: World, path: str) -> None:
    """AC-A11 (Verification: a spy on the underlying service method, not an end state): a step
    declaring reset_agent_context, enable_plan_mode, set_session_mode and auto_start_agent
    alongside durable actions: each session action reaches `sessions.record_effect` exactly
    once per entry, and holds no marker (AC-B8)."""
    wf = world.flow(
        [
            act("reset_agent_context"),
            act("enable_plan_mode"),
            act("clear_decisions"),
            act("set_session_mode", mode="m"),
            act("queue_run_for_each_participant", role="reviewer"),
            act("auto_start_agent"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, path)
    effects: list[tuple[str, ...]] = []
    record_effect = world.host.sessions.record_effect

    def spy(session_id: str, **changes: Any) -> Any:
        effects.append(tuple(sorted(changes)))
        return record_effect(session_id, **changes)

    world.host.sessions.record_effect = spy  # type: ignore[method-assign]
    world.arrive(wf, task.id, path)
    assert sorted(effects) == sorted(
        [("context_resets",), ("plan_mode",), ("session_mode",), ("prompts",)]
    )
    meta = world.meta(task.id)
    assert (len(meta["context_resets"]), len(meta["prompts"])) == (1, 1)
    assert len(world.runs(task.id)) == 1
    assert {m.kind for m in world.markers(task.id).values()} == {
        "clear_decisions",
        "queue_run_for_each_participant",
    }


# -- AC-A12 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_ac_a12_declared_order_holds_across_session_and_durable_kinds(
    world: World, path: str
) -> None:
    """AC-A12: an interleaved declaration [set_session_mode, clear_decisions, enable_plan_mode,
    fan-out, set_workflow_data] takes effect in exactly that order; a split-by-owner dispatch
    (all session kinds, then all durable ones, or the reverse) fails this. Per the criterion,
    auto_start_agent is not placed last here (see the next test)."""
    wf = world.flow(
        [
            act("set_session_mode", mode="m"),
            act("clear_decisions"),
            act("enable_plan_mode"),
            act("queue_run_for_each_participant", role="reviewer"),
            act("set_workflow_data", key="k", value=1),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    timeline = Timeline().install(world.host)
    task = world.enter(wf, path)
    assert timeline.of(task.id) == [
        "set_session_mode:m",
        "clear_decisions",
        "enable_plan_mode",
        "enqueue:on_enter",
        "set_workflow_data",
    ]


@pytest.mark.parametrize("path", HOISTING_PATHS)
def test_ac_a12_auto_start_declared_first_still_starts_after_the_rest(
    world: World, path: str
) -> None:
    """AC-A12 with AC-A9's exemption: [auto_start_agent, clear_decisions, set_session_mode]
    conforms when the clear runs first, the session mode follows in declared order, and the
    agent starts after both."""
    wf = world.flow(
        [act("auto_start_agent"), act("clear_decisions"), act("set_session_mode", mode="m")]
    )
    timeline = Timeline().install(world.host)
    task = world.enter(wf, path)
    assert timeline.of(task.id) == ["clear_decisions", "set_session_mode:m", "auto_start_agent"]
