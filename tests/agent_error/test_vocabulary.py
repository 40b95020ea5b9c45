"""AC-E1..AC-E14: the actions a step may declare under on_agent_error and how they run -
transitions through the transition function, the pre-engine walk and its WARNING, the
engine's errors, the shipped templates, and the one bundle a dispatch reads.

Mapping: the Go callback registry is the bundle's action-kind registry; "reaches no executor"
is a kind nobody declares or one whose feature is off (`RegisteredKind.executable` False);
`TransitionStore.LoadStep` is the workflow accessor (`host.workflows`, which caches a
workflow's declaration); `applyEngineTransition(triggerOnEnter: true)` is `core.transition.
move`, which hands the arrival to the entry dispatcher (destination on_enter); the retained
engine+registry+store value is the `Bundle`, published by one swap (`host.set_features`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from core.agents import worker
from core.errors import NotFound
from core.store import tables as t
from core.workflows import shipped_templates
from tests.agent_error.helpers import (
    World,
    act,
    dispatch_records,
    patched,
    probe,
    step,
    walk_warnings,
    with_fields,
)

WALK_FIELDS = {"workflow_id", "step_id", "step_name", "action_type", "task_id", "session_id"}


def _pair(world: World, on_agent_error: list[dict[str, Any]], **kw: Any) -> tuple[Any, Any, Any]:
    wf = world.board(on_agent_error, **kw)
    task = world.task(wf, description="Fix the login bug")
    return wf, task, world.session(task, world.scripted("a", "worker"))


def _db_error(*_args: Any, **_kwargs: Any) -> Any:
    raise sa.exc.OperationalError("SELECT ...", {}, Exception("connection reset by peer"))


def _not_found(*_args: Any, **_kwargs: Any) -> Any:
    raise NotFound("no step (the walk's read failed)")


# -- AC-E1, AC-E2 ----------------------------------------------------------------------------------


def test_ac_e1_every_declared_kind_is_handed_to_the_engine(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E1: the dispatch filters no kind: session kinds, Office's durable queue_run and
    fan-out, and a plugin's own kind declared under on_agent_error all run, in order."""
    agent = world.scripted("helper", "worker")
    _wf, task, session = _pair(
        world,
        [
            probe("first"),
            act("set_workflow_data", key="recovery", value="started"),
            act("enable_plan_mode"),
            act("queue_run", target=f"agent_profile_id:{agent.id}", reason="agent_error"),
            act("queue_run_for_each_participant", role="reviewer"),
            probe("last"),
        ],
    )

    world.fail(task, session)

    assert world.probe.labels() == ["first", "last"]
    meta = world.host.sessions.get(session.id).metadata
    assert meta["workflow_data"] == {"recovery": "started"}
    assert meta["plan_mode"] is True
    assert [(r.agent_profile_id, r.reason) for r in world.runs(task)] == [(agent.id, "agent_error")]
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]


def test_ac_e1_clear_decisions_runs_under_on_agent_error(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E1 (Action vocabulary: clear_decisions is one of the seven compiled kinds, degenerate
    but executable on a kanban step): declared under on_agent_error it executes like any other
    action - the list goes on to the probe after it and the dispatch records its INFO."""
    _wf, task, session = _pair(world, [act("clear_decisions"), probe("after-clear")])

    world.fail(task, session)

    assert world.probe.labels() == ["after-clear"]
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]


def test_ac_e2_a_step_without_actions_is_a_quiet_marked_no_op(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E2: the current step declares no on_agent_error actions: a successful no-op with one
    DEBUG (instead of the INFO, never with it), no warning, and the operation is marked
    applied - a redelivery is short-circuited and records nothing."""
    _wf, task, session = _pair(world, [])
    failure = world.failure(task, session, agent_execution_id="exec-1")

    world.host.runtime.fail_and_dispatch(failure)

    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["DEBUG"]
    assert [r for r in laneway_logs if r["level"] in ("WARNING", "ERROR")] == []
    laneway_logs.clear()
    world.host.runtime.fail_and_dispatch(failure)
    assert dispatch_records(laneway_logs) == []
    result = world.host.bundle.engine.handle_trigger(
        task.id, "on_agent_error", session_id=session.id, operation_id=failure.operation_id
    )
    assert result.idempotent is True


# -- AC-E3, AC-E10, AC-E11 -------------------------------------------------------------------------


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_ac_e3_a_recovery_move_runs_the_destinations_on_enter(world: World) -> None:
    """AC-E3: the transition an on_agent_error action resolves goes through the transition
    function, so the destination's on_enter runs (entry path E1) - a real R1 failure."""
    wf = world.board([act("move_to_next")])
    task = world.task(wf)
    session = world.session(task, world.crashing(status=3))

    world.turn(session)

    assert world.step_name(task.id) == "Recover"
    (entered,) = [s for s in world.probe.seen if s["trigger"] == "on_enter"]
    assert (entered["label"], entered["entry_path"]) == ("enter-recover", "E1")
    assert entered["step_id"] == world.step_id(wf, "Recover")


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
@pytest.mark.parametrize("description", ["Fix the login bug", ""])
def test_ac_e3_the_restarted_agent_gets_the_tasks_description(
    world: World, description: str
) -> None:
    """AC-E3 (taskDescription): a recovery move into a step whose on_enter auto-starts the
    agent builds the relaunched agent's prompt from the task's own description - passed
    through unchanged, an empty one included (no placeholder, no default)."""
    wf = world.flow(
        step("Work", 0, start=True, on_agent_error=[act("move_to_next")]),
        step(
            "Recover",
            1,
            prompt="Recover: {{task_prompt}}",
            on_enter=[act("auto_start_agent")],
        ),
    )
    task = world.task(wf, description=description)
    agent = world.crashing(status=3)
    session = world.session(task, agent)

    world.turn(session)

    (run,) = world.runs(task)
    assert (run.reason, run.workflow_step_id) == ("task_assigned", world.step_id(wf, "Recover"))
    assert worker.prompt_for(world.host, run) == f"Recover: {description}"


def test_ac_e10_a_wip_queued_destination_defers_on_enter_to_promotion(world: World) -> None:
    """AC-E10: the recovery move commits but the destination is full (WIP limit 1), so the
    task is queued there and its on_enter does not run now; it runs at the promotion (E3)
    when the step frees up. Not an AC-E3 failure."""
    wf = world.flow(
        step("Work", 0, start=True, on_agent_error=[act("move_to_next")]),
        step("Recover", 1, wip_limit=1, on_enter=[probe("enter-recover")]),
        step("Done", 2),
    )
    occupant = world.task(wf, title="occupant", step="Recover")
    task = world.task(wf)
    session = world.session(task, world.scripted("a", "worker"))

    world.fail(task, session)

    queued = world.host.tasks.get(task.id)
    assert (queued.queued_for_step_id, queued.wip_admitted) == (world.step_id(wf, "Recover"), False)
    assert world.probe.labels("on_enter") == []
    world.host.tasks.move(occupant.id, "Done")
    (entered,) = [s for s in world.probe.seen if s["trigger"] == "on_enter"]
    assert (entered["task_id"], entered["entry_path"]) == (task.id, "E3")


def test_ac_e11_a_recovery_move_is_labelled_on_agent_error_in_history(world: World) -> None:
    """AC-E11: the session_step_history row of a move committed under this trigger carries
    trigger "on_agent_error" (not auto_complete); a routine on_turn_complete move keeps its
    own label."""
    wf = world.flow(
        step("Work", 0, start=True, on_agent_error=[act("move_to_next")]),
        step("Recover", 1, on_turn_complete=[act("move_to_next")]),
        step("Done", 2),
    )
    task = world.task(wf)
    session = world.session(task, world.scripted("a", "worker"))

    world.fail(task, session)
    world.host.turns.complete(task.id, session.id)

    rows = world.history(task)
    assert [(r["to_step_id"], r["trigger"]) for r in rows] == [
        (world.step_id(wf, "Recover"), "on_agent_error"),
        (world.step_id(wf, "Done"), "auto_complete"),
    ]


# -- AC-E4, AC-E9 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("why", ["nobody-provides-it", "feature-off"])
def test_ac_e4_an_action_with_no_executor_warns_with_six_fields(
    world: World, laneway_logs: list[dict[str, Any]], why: str
) -> None:
    """AC-E4: an action that reaches no executor (a kind nobody declares; an Office kind with
    the office feature off) is walked before the engine call and warned about once, naming
    workflow id, step id, step name, action type, task id and session id; the remaining
    actions are unaffected and the dispatch record is still the one INFO."""
    kind = "ae_nobody_provides_this" if why == "nobody-provides-it" else "queue_run"
    wf, task, session = _pair(world, [act(kind), probe("after")])
    if why == "feature-off":
        world.host.set_features(office=False)

    world.fail(task, session)

    (warning,) = walk_warnings(laneway_logs, session.id)
    assert {k: warning["extra"][k] for k in WALK_FIELDS} == {
        "workflow_id": wf.id,
        "step_id": world.step_id(wf, "Work"),
        "step_name": "Work",
        "action_type": kind,
        "task_id": task.id,
        "session_id": session.id,
    }
    assert world.probe.labels() == ["after"]
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]


def test_ac_e4_ac_e7_ac_e9_moves_never_warn(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E4's transition carve-out (with AC-E7 and AC-E9): move kinds execute structurally,
    so none warns - not the first move, not a second transition action, not one carrying
    requires_approval, not one whose guard is unsatisfied."""
    _wf, task, session = _pair(
        world,
        [
            act("move_to_step", step_position=2, requires_approval=True),
            act("move_to_step", step_position=2, **{"if": {"ae_gate": {"open": False}}}),
            act("move_to_next"),
            act("move_to_previous"),
            act("move_to_step", step_position=2),
        ],
    )

    world.fail(task, session)

    assert walk_warnings(laneway_logs, session.id) == []
    assert world.step_name(task.id) == "Recover"


def test_ac_e9_an_unsatisfied_guard_skips_that_move_only(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E9: a transition whose guard is not satisfied is skipped - recorded by the engine's
    own guard-not-fired record, as under every trigger - and resolves no target, so the next
    eligible move wins; a guard that passes lets its move win."""
    _wf, task, session = _pair(
        world,
        [
            act("move_to_step", step_position=2, **{"if": {"ae_gate": {"open": False}}}),
            act("move_to_next"),
        ],
    )

    world.fail(task, session)

    assert world.step_name(task.id) == "Recover"
    assert len(with_fields(laneway_logs, "DEBUG", guard="ae_gate", task_id=task.id)) == 1

    _wf, task, session = _pair(
        world,
        [
            act("move_to_step", step_position=2, **{"if": {"ae_gate": {"open": True}}}),
            act("move_to_next"),
        ],
    )
    world.fail(task, session)
    assert world.step_name(task.id) == "Done"


def test_ac_e9_requires_approval_is_not_a_transition(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E9: a move carrying requires_approval is not treated as a transition: the task
    stays, nothing warns, and the dispatch still counts the declared action (INFO)."""
    _wf, task, session = _pair(world, [act("move_to_next", requires_approval=True)])

    world.fail(task, session)

    assert world.step_name(task.id) == "Work"
    assert walk_warnings(laneway_logs, session.id) == []
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]


# -- AC-E5 -----------------------------------------------------------------------------------------


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_ac_e5_an_engine_error_is_logged_not_raised(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E5: the engine raises (move_to_next from the last step): one ERROR record of the
    dispatch with task and session ids, nothing propagates, and the failure bookkeeping the
    handler committed stands."""
    wf = world.flow(step("Last", 0, start=True, on_agent_error=[act("move_to_next")]))
    task = world.task(wf)
    session = world.session(task, world.crashing(status=3))

    outcome = world.turn(session)

    assert outcome.route == "R1"
    (record,) = dispatch_records(laneway_logs)
    assert record["level"] == "ERROR"
    assert (record["extra"]["task_id"], record["extra"]["session_id"]) == (task.id, session.id)
    assert world.host.sessions.get(session.id).metadata["last_agent_error"]["route"] == "R1"
    assert world.host.tasks.get(task.id).state == "REVIEW"


def test_ac_e5_ac_a6_an_action_failure_is_an_engine_error_not_a_dispatch(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E5 / AC-A6 and the Failure mode "queue_run with target workspace.ceo_agent on a
    kanban workspace with no CEO": resolution fails, the evaluation aborts (nothing after it
    runs, operation unmarked - AC-C6), and the dispatch's one record is AC-E5's ERROR with the
    task and session ids - not AC-A6's INFO, which means "dispatched"."""
    _wf, task, session = _pair(
        world, [act("queue_run", target="workspace.ceo_agent"), probe("never")]
    )

    world.fail(task, session)

    assert world.probe.labels() == []
    records = dispatch_records(laneway_logs)
    assert [r["level"] for r in records] == ["ERROR"]
    assert (records[0]["extra"]["task_id"], records[0]["extra"]["session_id"]) == (
        task.id,
        session.id,
    )


# -- AC-E6 -----------------------------------------------------------------------------------------


def test_ac_e6_only_office_default_declares_on_agent_error() -> None:
    """AC-E6: no shipped template gains an on_agent_error declaration; the only one, as in the
    reference, is Office Default's Work step: queue_run to the workspace CEO."""
    declaring = {
        (decl.template_id, s.name): [a.as_dict() for a in s.events.get("on_agent_error", ())]
        for decl in shipped_templates()
        for s in decl.steps
        if s.events.get("on_agent_error")
    }
    assert list(declaring) == [("office-default", "Work")]
    (actions,) = declaring.values()
    assert [(a["type"], a["config"].get("target")) for a in actions] == [
        ("queue_run", "workspace.ceo_agent")
    ]


# -- AC-E7, AC-E8 ----------------------------------------------------------------------------------


def test_ac_e7_duplicate_actions_each_run_in_declared_order(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E7: the same non-transition kind declared several times runs each time, in declared
    order (no deduplication); of two transition actions only the first eligible one moves."""
    wf, task, session = _pair(
        world,
        [
            probe("a"),
            act("move_to_step", step_position=1),
            probe("b"),
            act("move_to_step", step_position=2),
            probe("a"),
        ],
    )

    world.fail(task, session)

    assert world.probe.labels() == ["a", "b", "a"]
    assert world.step_name(task.id) == "Recover"
    assert [r["to_step_id"] for r in world.history(task)] == [world.step_id(wf, "Recover")]


def test_ac_e8_a_move_to_the_current_step_is_no_transition(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E8: a move resolving to the step the task stands on applies no transition (no
    history row) and runs no on_enter; the operation is still marked applied."""
    wf = world.flow(
        step(
            "Work",
            0,
            start=True,
            on_enter=[probe("enter-work")],
            on_agent_error=[act("move_to_step", step_position=0)],
        ),
        step("Recover", 1),
    )
    task = world.task(wf)
    session = world.session(task, world.scripted("a", "worker"))
    failure = world.failure(task, session, agent_execution_id="exec-1")

    world.host.runtime.fail_and_dispatch(failure)

    assert world.step_name(task.id) == "Work"
    assert world.probe.seen == []
    assert world.history(task) == []
    laneway_logs.clear()
    world.host.runtime.fail_and_dispatch(failure)
    assert dispatch_records(laneway_logs) == []


# -- AC-E12, AC-E13, AC-E14 ------------------------------------------------------------------------


def test_ac_e12_the_walk_reads_the_step_the_engine_executes(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E12: the walk reads the step's actions through the same accessor the engine loads
    the step from (the workflow accessor and its cache), not by re-reading the step row.
    The row is rewritten behind the accessor (as a sync tool would) to declare a kind nobody
    provides; walk and engine both still see the declaration the accessor holds, so the walk
    raises no false alarm about an action the engine does not execute."""
    wf, task, session = _pair(world, [probe("cached")])
    # The accessor holds the declaration as of the board's catalogue version now (setting up
    # moved the version: a profile was added); the rewrite below does not move it.
    world.host.follow_board()
    world.host.workflows.by_id(wf.id)
    steps = t.workflow_steps
    world.write(
        sa.update(steps)
        .where(steps.c.id == world.step_id(wf, "Work"))
        .values(events=json.dumps({"on_agent_error": [{"type": "ae_nobody_provides_this"}]}))
    )

    world.fail(task, session)

    assert world.probe.labels() == ["cached"]
    assert walk_warnings(laneway_logs, session.id) == []


@pytest.mark.parametrize("office_at_failure", [True, False])
def test_ac_e13_walk_and_engine_come_from_the_one_bundle_read(
    world: World, laneway_logs: list[dict[str, Any]], office_at_failure: bool
) -> None:
    """AC-E13: the dispatch reads the bundle once and uses that one for both the walk's
    registry and the engine. A new bundle is published mid-dispatch (the office feature is
    flipped right after the dispatch's bundle read, on its first repository read): the walk
    and the engine still agree - the Office kind runs and nothing warns, or it has no executor
    and the walk warns about exactly the action the engine skipped."""
    agent = world.scripted("helper", "worker")
    _wf, task, session = _pair(world, [act("queue_run", target=f"agent_profile_id:{agent.id}")])
    world.host.set_features(office=office_at_failure)
    dispatch = world.host.runtime.handle_failure(world.failure(task, session))
    before = world.host.bundle.generation
    original_get = world.host.sessions.get

    def republish_then_get(session_id: str) -> Any:
        if world.host.bundle.generation == before:
            world.host.set_features(office=not office_at_failure)
        return original_get(session_id)

    with patched(world.host.sessions, "get", republish_then_get):
        dispatch()

    assert world.host.bundle.generation == before + 1
    executed = len(world.runs(task)) == 1
    warned = len(walk_warnings(laneway_logs, session.id))
    assert executed is office_at_failure
    assert warned == (0 if executed else 1)


@pytest.mark.parametrize(
    "walk_error",
    [
        "not-found",
        pytest.param(
            "transient",
        ),
    ],
)
def test_ac_e14_a_failed_walk_read_still_dispatches(
    world: World, laneway_logs: list[dict[str, Any]], walk_error: str
) -> None:
    """AC-E14: the walk's step read fails while the engine's own load succeeds: the walk is
    skipped without a warning or a record of its own, and the dispatch proceeds to the engine
    and records what the engine's result dictates (INFO: the action ran). Both a not-found and
    a transient database error on the walk's read ("the walk hit a transient error the retry
    did not")."""
    _wf, task, session = _pair(world, [probe("ran")])
    dispatch = world.host.runtime.handle_failure(world.failure(task, session))
    failing = _not_found if walk_error == "not-found" else _db_error

    with patched(world.host.workflows, "step_by_id", failing):
        dispatch()

    assert world.probe.labels() == ["ran"]
    assert walk_warnings(laneway_logs, session.id) == []
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]


def test_ac_e14_walk_and_engine_load_both_fail_gives_one_error(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E14, first branch: the engine's step load fails as well: the outcome is AC-E5's
    single ERROR, the only record - the walk adds none."""
    _wf, task, session = _pair(world, [probe("never")])
    dispatch = world.host.runtime.handle_failure(world.failure(task, session))

    with (
        patched(world.host.workflows, "step_by_id", _not_found),
        patched(world.host.repository, "workflow", _not_found),  # the engine's load
    ):
        dispatch()

    assert world.probe.labels() == []
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["ERROR"]
    assert walk_warnings(laneway_logs, session.id) == []


def test_ac_e14_an_applied_operation_with_a_failed_walk_records_nothing(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-E14, third branch: the operation was already applied, so the engine short-circuits
    above its step load: no action, no dispatch record, and the failed walk adds none."""
    _wf, task, session = _pair(world, [probe("once")])
    failure = world.failure(task, session, agent_execution_id="exec-1")
    world.host.runtime.fail_and_dispatch(failure)
    laneway_logs.clear()
    dispatch = world.host.runtime.handle_failure(failure)

    with patched(world.host.workflows, "step_by_id", _not_found):
        dispatch()

    assert world.probe.labels() == ["once"]
    assert dispatch_records(laneway_logs) == []
    assert walk_warnings(laneway_logs, session.id) == []
