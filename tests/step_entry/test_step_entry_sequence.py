"""spec/step-entry-sequence: AC-OFFICE-STEP-ENTRY-001.1 ... 001.10, each as the governing text
reads per DESIGN.md ("Where the documents disagree": spec/on-enter-action-dispatch, the later
one, governs where they overlap):

- task creation is not an arrival (001.1's "creating a task directly into a step is an
  arrival" is overridden);
- hoisting (on-enter AC-A9) applies on E1-E3/E5, so "declared order" (001.1) is asserted over
  declarations where hoisting cannot reorder anything, and with hoisting where it can;
- 001.9's "an execution lost ... shall not be recovered" holds for session kinds only: durable
  kinds left incomplete by a crash are resumed by the startup scan (on-enter AC-B9);
- 001.3 ("behave exactly as it does now") is asserted as today's behaviour: no ledger record,
  session kinds once each in their fixed positions, no diagnostics.

Routes are driven through their real entry points (tests/step_entry/helpers.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import entry as entry_dispatch
from core import faults, ledger
from core.errors import LanewayError
from tests.on_enter.helpers import (
    PATHS,
    KindsPlugin,
    Timeline,
    World,
    act,
    open_host,
    open_world,
    problems,
    records,
)
from tests.step_entry.helpers import ROUTE_IDS, ROUTES, Route, arrive, drive, place, route_flow


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


def _durable_sequence(world: World) -> list[dict[str, Any]]:
    appr, boss = world.profile("appr"), world.profile("boss")
    return [
        act("ensure_participant_seat", role="approver", agent_profile_id=appr.id),
        act("clear_decisions"),
        act("queue_run_for_each_participant", role="approver", reason="fan"),
        act("run_code_review"),
        act("queue_run", target=f"agent_profile_id:{boss.id}", reason="bare"),
        act("t_probe"),
    ]


DURABLE_ORDER = [
    "ensure_participant_seat",
    "clear_decisions",
    "enqueue:fan",
    "run_code_review",
    "enqueue:bare",
]


def _redispatch(world: World, task_id: str, entry_seq: int = 1) -> str:
    for entry, _markers in world.entries(task_id):
        if entry.entry_seq == entry_seq:
            _wf, step = world.host.workflows.step_by_id(entry.step_id)
            return entry_dispatch.redispatch(world.host, world.host.tasks.get(task_id), step, entry)
    raise AssertionError(f"no entry {entry_seq}")


ROUTE_SESSION = [
    pytest.param(route, session, id=f"{route.name}-{'session' if session else 'no-session'}")
    for route in ROUTES
    for session in (True, False)
    if session or not route.needs_session
]


# -- 001.1 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("route", "session"), ROUTE_SESSION)
def test_001_1_every_arrival_executes_every_declared_action_in_order(
    world: World, route: Route, session: bool
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.1: every arrival, by every route, with or without a live
    session, executes every declared entry action in declared order, including those whose
    effect is on participants, decisions or queued runs."""
    timeline = Timeline().install(world.host)
    wf = route_flow(world, route, _durable_sequence(world))
    task = place(world, wf, route, session=session)
    target = World.step_id(wf)
    seeded = world.add_decision(task.id, target)
    arrive(world, wf, task.id, route)
    assert timeline.of(task.id) == DURABLE_ORDER
    assert [p["task_id"] for p in world.plugin.seen] == [task.id]
    assert seeded not in world.decision_ids(task.id, target)
    assert sorted(r.reason for r in world.runs(task.id)) == ["bare", "fan"]
    assert len(world.reviews(task.id)) == 1
    ((entry, markers),) = [(e, m) for e, m in world.entries(task.id) if e.step_id == target]
    assert entry.entry_path == route.entry_path
    assert [m.state for m in markers] == ["done"] * 6


def test_001_1_creation_is_not_an_arrival(world: World) -> None:
    """AC-OFFICE-STEP-ENTRY-001.1 as governed by on-enter-action-dispatch (Out of scope:
    "Dispatching on_enter on task creation"): creating a task directly into a step declaring
    entry actions runs none of them and allocates no record."""
    timeline = Timeline().install(world.host)
    wf = world.flow(_durable_sequence(world))
    task = world.host.tasks.create(workflow=wf.id, title="created", step="Target")
    assert timeline.of(task.id) == []
    assert world.entries(task.id) == []
    assert world.plugin.seen == []


# -- 001.2 -----------------------------------------------------------------------------------------


def test_001_2_execution_carries_an_entry_identity_and_redelivery_is_recognised(
    world: World,
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.2: the execution carries the entry identity (task, step,
    entry_seq, the ledger record); a redelivery of that entry is recognised as such and
    executes nothing again."""
    wf = world.flow([act("t_probe"), act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "rev")
    task = world.enter(wf, "E2")
    ((entry, _markers),) = world.entries(task.id)
    (probe,) = world.plugin.seen
    assert (probe["entry_id"], probe["entry_seq"], probe["step_id"]) == (
        entry.id,
        entry.entry_seq,
        entry.step_id,
    )
    runs_before = [r.id for r in world.runs(task.id)]
    _redispatch(world, task.id)
    assert len(world.plugin.seen) == 1
    assert [r.id for r in world.runs(task.id)] == runs_before


# -- 001.3 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("declared", ["none", "session_only"])
@pytest.mark.parametrize("path", PATHS)
def test_001_3_steps_without_new_kinds_behave_as_before(
    world: World, path: str, declared: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.3: a step declaring no entry action, or only the session
    actions handled today, behaves as before: no ledger record, each session action once in
    its fixed position (reset first, auto-start last; declared order on E4), no diagnostics."""
    on_enter = (
        None
        if declared == "none"
        else [
            act("auto_start_agent"),
            act("set_session_mode", mode="m"),
            act("reset_agent_context"),
        ]
    )
    wf = world.flow(on_enter)
    timeline = Timeline().install(world.host)
    task = world.place(wf, path)
    laneway_logs.clear()
    world.arrive(wf, task.id, path)
    assert world.entries(task.id) == []
    assert problems(laneway_logs) == []
    if declared == "none":
        assert timeline.of(task.id) == []
    elif path == "E4":
        assert timeline.of(task.id) == [
            "auto_start_agent",
            "set_session_mode:m",
            "reset_agent_context",
        ]
    else:
        assert timeline.of(task.id) == [
            "reset_agent_context",
            "set_session_mode:m",
            "auto_start_agent",
        ]


# -- 001.4 -----------------------------------------------------------------------------------------


def test_001_4_a_failure_is_recorded_and_the_rest_are_attempted(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.4: one action fails: its failure is recorded (failed marker,
    ERROR record) and the remaining actions are still attempted."""
    wf = world.flow(
        [
            act("t_fail", cause="broken"),
            act("queue_run_for_each_participant", role="reviewer"),
            act("set_session_mode", mode="m"),
            act("run_code_review"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E1")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E1")
    markers = world.markers(task.id)
    assert (markers[0].state, markers[0].cause) == ("failed", "broken")
    assert [markers[p].state for p in (1, 3)] == ["done", "done"]
    assert len(world.runs(task.id)) == 1
    assert len(world.reviews(task.id)) == 1
    assert world.meta(task.id)["session_mode"] == "m"
    assert [r["extra"].get("action_type") for r in records(laneway_logs, "ERROR")] == ["t_fail"]


def test_001_4_except_where_a_criterion_says_otherwise_failed_clear_halts(
    world: World,
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.4's exception, as on-enter AC-C2 states it: a failed
    clear_decisions stops the remaining actions."""
    wf = world.flow(
        [act("clear_decisions"), act("queue_run_for_each_participant", role="reviewer")]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E2")

    def broken(*_args: Any) -> int:
        raise RuntimeError("boom")

    world.host.decisions.clear = broken  # type: ignore[method-assign]
    world.arrive(wf, task.id, "E2")
    assert world.runs(task.id) == []
    assert [m.state for m in world.markers(task.id).values()] == ["failed"]


# -- 001.5 / 001.8 ---------------------------------------------------------------------------------


def _mixed(world: World) -> list[dict[str, Any]]:
    return [
        act("reset_agent_context"),
        act("t_probe"),
        act("enable_plan_mode"),
        act("clear_decisions"),
        act("set_session_mode", mode="m"),
        act("queue_run_for_each_participant", role="approver"),
        act("auto_start_agent"),
    ]


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_001_5_and_001_8_each_action_once_by_one_component_on_every_route(
    world: World, route: Route, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.5 and AC-OFFICE-STEP-ENTRY-001.8 (asserted over the routes by
    which a task can arrive, including the one that moves a task between workflows): one
    arrival is dispatched
    once, and each declared action takes effect exactly once; the session actions executed
    today are not executed a second time by the new path."""
    world.profile("appr")
    wf = route_flow(world, route, _mixed(world))
    world.seat(wf, "approver", "appr")
    task = place(world, wf, route, session=True)
    timeline = Timeline().install(world.host)
    laneway_logs.clear()
    arrive(world, wf, task.id, route)
    target = World.step_id(wf)
    dispatched = [
        r["extra"]
        for r in laneway_logs
        if r["extra"].get("event") == "arrival" and r["extra"].get("task_id") == task.id
    ]
    assert [(a["step_id"], a["entry_path"]) for a in dispatched] == [(target, route.entry_path)]
    got = timeline.of(task.id)
    expected = {
        "reset_agent_context",
        "enable_plan_mode",
        "clear_decisions",
        "set_session_mode:m",
        "enqueue:on_enter",
        "auto_start_agent",
    }
    assert sorted(got) == sorted(expected)  # each exactly once
    assert [p["task_id"] for p in world.plugin.seen] == [task.id]
    assert len(world.runs(task.id)) == 1


# -- 001.6 -----------------------------------------------------------------------------------------


def test_001_6_other_triggers_keep_abort_on_first_failure(world: World) -> None:
    """AC-OFFICE-STEP-ENTRY-001.6: continue-on-error is step entry's only; on
    on_turn_complete the first failing action still aborts the rest and the transition."""
    boss = world.profile("boss")
    wf = world.flow(
        [act("queue_run", target=f"agent_profile_id:{boss.id}", reason="entry")],
        src_on_turn_complete=[
            act("t_fail"),
            act("queue_run", target=f"agent_profile_id:{boss.id}", reason="turn"),
            act("move_to_step", step_position=1),
        ],
    )
    task = world.place(wf, "E1")
    result = world.host.turns.complete(task.id)
    assert result["transitioned"] is False
    assert world.runs(task.id) == []
    assert world.host.tasks.get(task.id).workflow_step_id == World.step_id(wf, "Src")


# -- 001.7 -----------------------------------------------------------------------------------------


class SimulatedCrash(Exception):
    pass


def test_001_7_identity_is_committed_with_the_step_change(world: World) -> None:
    """AC-OFFICE-STEP-ENTRY-001.7: when the entry sequence runs, the step change and the entry
    identity it runs under are already committed together (seen from another connection);
    two arrivals of the task at the same step carry different identities."""
    wf = world.flow([act("t_probe")])
    task = world.enter(wf, "E2")
    world.host.tasks.move(task.id, "Out")
    world.host.tasks.move(task.id, "Target")
    first, second = world.plugin.seen
    target = World.step_id(wf)
    assert (first["committed_step_id"], first["entry_seq"], first["committed_entry_seqs"]) == (
        target,
        1,
        [1],
    )
    assert (second["committed_step_id"], second["entry_seq"], second["committed_entry_seqs"]) == (
        target,
        2,
        [1, 2],
    )
    assert first["entry_id"] != second["entry_id"]


def test_001_7_no_identity_for_a_step_change_that_does_not_commit(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.7: the identity is written by the same write as the step
    change: when it cannot be written the step change does not commit either, and a step
    change that does not commit is assigned no identity and runs nothing."""
    wf = world.flow([act("t_probe")])
    task = world.place(wf, "E2")

    def failing(*_args: Any, **_kwargs: Any) -> Any:
        raise sa.exc.OperationalError("INSERT INTO step_entries", {}, Exception("disk full"))

    monkeypatch.setattr(ledger, "allocate", failing)
    with pytest.raises(LanewayError):
        world.arrive(wf, task.id, "E2")
    assert world.host.tasks.get(task.id).workflow_step_id == World.step_id(wf, "Src")
    assert world.entries(task.id) == []
    assert world.plugin.seen == []


def test_001_7_two_dispatches_of_one_arrival_carry_the_same_identity(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.7: the arrival's dispatch ran its action, then the process
    "died" before settling it; the next process dispatches the same arrival again (the startup
    scan) under the same identity: the same record, the same entry_seq."""
    plugin = KindsPlugin()
    files = tmp_path / "files"
    files.mkdir()
    real_reach = faults.reach

    def crash(point: str) -> None:
        if point == "dispatch.after_effect":
            raise SimulatedCrash(point)
        real_reach(point)

    with open_host(db_url, plugin) as first:
        world = World(first, files, plugin, db_url)
        wf = world.flow([act("t_probe")])
        task = world.place(wf, "E2")
        monkeypatch.setattr(faults, "reach", crash)
        with pytest.raises(SimulatedCrash):
            world.arrive(wf, task.id, "E2")
        monkeypatch.setattr(faults, "reach", real_reach)
    with open_host(db_url, plugin) as second:
        world = World(second, files, plugin, db_url)
        one, two = plugin.seen
        assert (one["entry_id"], one["entry_seq"]) == (two["entry_id"], two["entry_seq"])
        ((entry, markers),) = world.entries(task.id)
        assert (entry.id, entry.entry_seq, [m.state for m in markers]) == (
            one["entry_id"],
            1,
            ["done"],
        )


# -- 001.9 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_001_9_the_sequence_runs_before_the_committing_caller_returns(
    world: World, path: str
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.9: the execution is synchronous with the committing write: it
    runs after the step change committed (the probe saw it committed from another connection)
    and before the caller returns (every effect is visible the moment the call returns)."""
    wf = world.flow(
        [
            act("t_probe"),
            act("queue_run_for_each_participant", role="reviewer"),
            act("reset_agent_context"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, path)
    world.arrive(wf, task.id, path)  # returns only after the sequence ran
    (probe,) = world.plugin.seen
    assert (probe["committed_step_id"], probe["committed_admitted"]) == (World.step_id(wf), True)
    assert len(world.runs(task.id)) == 1
    assert len(world.meta(task.id)["context_resets"]) == 1
    assert world.entries(task.id)[0][0].terminal is True


def test_001_9_a_lost_execution_is_not_recovered_for_session_kinds(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.9, as DESIGN.md reads it: the process fails between the
    commit and the call. The session actions of that entry are not recovered (the next
    process does not run them; the task recovers them by arriving again), while its durable
    actions are resumed by the startup scan (spec on-enter AC-B9 governs)."""
    plugin = KindsPlugin()
    files = tmp_path / "files"
    files.mkdir()
    real_reach = faults.reach

    def crash(point: str) -> None:
        if point == "transition.after_commit":
            raise SimulatedCrash(point)
        real_reach(point)

    with open_host(db_url, plugin) as first:
        world = World(first, files, plugin, db_url)
        wf = world.flow(
            [
                act("reset_agent_context"),
                act("set_session_mode", mode="m"),
                act("queue_run_for_each_participant", role="reviewer"),
                act("auto_start_agent"),
            ]
        )
        world.seat(wf, "reviewer", "rev")
        task = world.place(wf, "E2")
        monkeypatch.setattr(faults, "reach", crash)
        with pytest.raises(SimulatedCrash):
            world.arrive(wf, task.id, "E2")
        monkeypatch.setattr(faults, "reach", real_reach)
        assert world.host.tasks.get(task.id).workflow_step_id == World.step_id(wf)
        assert world.runs(task.id) == []
        assert world.meta(task.id) == {}
    with open_host(db_url, plugin) as second:
        world = World(second, files, plugin, db_url)
        assert world.meta(task.id) == {}  # session kinds: not recovered
        assert len(world.runs(task.id)) == 1  # durable kinds: resumed
        assert world.entries(task.id)[0][0].terminal is True
        world.host.tasks.move(task.id, "Out")
        world.host.tasks.move(task.id, "Target")  # arriving again recovers the rest
        meta = world.meta(task.id)
        assert (len(meta["context_resets"]), meta["session_mode"], len(meta["prompts"])) == (
            1,
            "m",
            1,
        )


# -- 001.10 ----------------------------------------------------------------------------------------


def test_001_10_redelivery_after_a_restart_is_still_recognised(
    db_url: str, tmp_path: Path, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-OFFICE-STEP-ENTRY-001.10: recognition rests on durable state keyed by the entry
    identity: after a restart (a new process, a new epoch, empty memory), a redelivery of an
    entry that already ran executes nothing again: no second clear (a decision recorded since
    survives), no second run, no second probe."""
    plugin = KindsPlugin()
    files = tmp_path / "files"
    files.mkdir()
    with open_host(db_url, plugin) as first:
        world = World(first, files, plugin, db_url)
        wf = world.flow(
            [
                act("clear_decisions"),
                act("t_probe"),
                act("queue_run_for_each_participant", role="reviewer"),
            ]
        )
        seat = world.seat(wf, "reviewer", "rev")
        task = world.enter(wf, "E2")
        world.host.decisions.record(task.id, "Target", seat, "approved")
        votes = world.decision_ids(task.id, World.step_id(wf))
        runs_before = [r.id for r in world.runs(task.id)]
        first_epoch = first.epoch
    with open_host(db_url, plugin) as second:
        world = World(second, files, plugin, db_url)
        assert second.epoch != first_epoch
        laneway_logs.clear()
        _redispatch(world, task.id)
        assert len(plugin.seen) == 1
        assert world.decision_ids(task.id, World.step_id(wf)) == votes
        assert [r.id for r in world.runs(task.id)] == runs_before
        assert problems(laneway_logs) == []


# -- the route list is complete --------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_001_1_route_list_covers_every_entry_path(world: World, route: Route) -> None:
    """AC-OFFICE-STEP-ENTRY-001.1 "no route ... exempt": the routes above reach E1-E5 (turn
    complete, turn start and a decision for E1; both WIP promotions for E3; the operator's and
    the declared switch_workflow for E4; update and start for E5); each one records its path."""
    _wf, task = drive(world, route, [act("t_probe")])
    assert [p["entry_path"] for p in world.plugin.seen] == [route.entry_path]
    assert {r.entry_path for r in ROUTES} == {"E1", "E2", "E3", "E4", "E5"}
    assert task.wip_admitted is True
