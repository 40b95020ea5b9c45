"""AC-A3, AC-A4, AC-A11 and the Concurrency section: where the dispatch sits in terminal-failure
handling, which step it consults, and that it runs off the session guard.

Mapping: the Go handler's `cancelInFlight` mutex is laneway's per-session
`AgentRuntime.guard(session_id)` (non-reentrant, like the mutex); `handleRecoverableFailure-
LockedState` returning a `func()` is `AgentRuntime.handle_failure` returning the dispatch
closure, which `fail_and_dispatch` invokes after the guard is released; the launched-not-
awaited `cleanupAgentExecution` goroutine is the thread that kills the agent process; a
panic is any exception escaping a callback.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from core.agents.protocols import exec_process as process
from tests.agent_error.helpers import (
    World,
    act,
    background,
    dispatch_records,
    probe,
    try_guard,
    wait_for,
    with_fields,
)

SIGNAL_THEN_CRASH = """
echo '{"step_complete": true}'
echo "crashed after signalling" >&2
exit 1
"""


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_ac_a3_dispatch_is_last_after_bookkeeping_and_cleanup_launch(
    world: World, laneway_logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-A3: when the on_agent_error action runs, the failure bookkeeping is already
    committed (session state and its last error, the task's REVIEW state), the cleanup of the
    agent process has been launched, and the session guard is released. The dispatch does
    not wait for the cleanup: the turn returns while the cleanup is still blocked."""
    entered, release = threading.Event(), threading.Event()
    original_kill = process.AgentProcess.kill

    def slow_kill(self: process.AgentProcess) -> None:
        entered.set()
        release.wait(20)
        original_kill(self)

    monkeypatch.setattr(process.AgentProcess, "kill", slow_kill)
    host = world.host

    def at_dispatch(ctx: Any, seen: dict[str, Any]) -> None:
        failed = seen["payload"]["failed_session_id"]
        session = host.sessions.get(failed)
        seen["session_state"] = session.state
        seen["last_error"] = dict(session.metadata.get("last_agent_error") or {})
        seen["task_state"] = host.tasks.get(ctx.task.id).state
        # launched before the dispatch began: it gets going while the dispatch still runs
        seen["cleanup_launched"] = entered.wait(10)

    world.probe.on_run = at_dispatch
    wf = world.board([probe("at-dispatch")])
    task = world.task(wf)
    session = world.session(task, world.crashing(status=4))

    try:
        outcome = world.turn(session)
        cleanup_still_blocked = not release.is_set()
    finally:
        release.set()

    assert outcome.route == "R1"
    assert cleanup_still_blocked, "the dispatch must not wait on the cleanup"
    (seen,) = world.probe.on_agent_error()
    assert seen["session_state"] == "WAITING_FOR_INPUT"
    assert seen["last_error"]["route"] == "R1"
    assert seen["task_state"] == "REVIEW"
    assert seen["cleanup_launched"] is True
    assert seen["guard_held"] is False
    assert seen["guard_acquired"] is True
    assert len(dispatch_records(laneway_logs, task_id=task.id)) == 1


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_ac_a4_a_reconciled_completion_signal_moves_the_task_before_the_dispatch(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A4 (and AC-A3's "signal reconcile" before the dispatch): a real agent signals
    step_complete and then crashes. The pending signal is reconciled first (Work's
    on_turn_complete moves the task to Recover), so the dispatch consults Recover's
    on_agent_error, not Work's - read from the task as it stands at dispatch time."""
    wf = world.flow(
        {
            "name": "Work",
            "position": 0,
            "is_start_step": True,
            "events": {
                "on_turn_complete": [act("move_to_next")],
                "on_agent_error": [probe("work")],
            },
        },
        {"name": "Recover", "position": 1, "events": {"on_agent_error": [probe("recover")]}},
        {"name": "Done", "position": 2},
    )
    task = world.task(wf)
    session = world.session(task, world.script("signaller", SIGNAL_THEN_CRASH))

    outcome = world.turn(session)

    assert outcome.route == "R1"
    assert world.step_name(task.id) == "Recover"
    assert world.probe.labels() == ["recover"]
    (seen,) = world.probe.on_agent_error()
    assert seen["step_id"] == world.step_id(wf, "Recover")
    assert world.host.sessions.get(session.id).metadata.get("pending_step_signal") is None
    (record,) = dispatch_records(laneway_logs)
    assert record["extra"]["step_id"] == world.step_id(wf, "Recover")


def test_ac_a11_dispatch_runs_off_the_guard_on_the_failing_thread(world: World) -> None:
    """AC-A11: the dispatch runs with the failed session's guard released (an action can take
    it again, here from another thread with a timeout), synchronously on the thread that
    handled the failure (no new thread), and `handle_failure` hands the dispatch back to its
    caller as a closure instead of running it under the guard."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    session = world.session(task, world.scripted("a", "worker"))
    failure = world.failure(task, session, agent_execution_id="exec-1")

    dispatch = world.host.runtime.handle_failure(failure)
    assert world.probe.on_agent_error() == [], "handle_failure must not dispatch itself"
    assert world.host.runtime.guard_held(session.id) is False
    dispatch()

    (seen,) = world.probe.on_agent_error()
    assert seen["guard_held"] is False
    assert seen["guard_acquired"] is True
    assert seen["thread"] == threading.get_ident()


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_ac_a11_auto_start_agent_under_on_agent_error_completes(world: World) -> None:
    """AC-A11: a step whose on_agent_error declares a bare auto_start_agent completes instead
    of deadlocking: the turn (a real crashing agent) returns, the agent is restarted (a
    task_assigned run queued for the failed session's agent at the step), and the session's
    guard is free afterwards. The probe after it finds the guard free too."""
    wf = world.board([act("auto_start_agent"), probe("after-auto-start")])
    task = world.task(wf)
    agent = world.crashing(status=2)
    session = world.session(task, agent)

    outcome = wait_for(background(lambda: world.turn(session)), timeout=30)

    assert outcome.route == "R1"
    (seen,) = world.probe.on_agent_error()
    assert seen["guard_acquired"] is True
    runs = world.runs(task)
    assert [(r.reason, r.agent_profile_id, r.workflow_step_id) for r in runs] == [
        ("task_assigned", agent.id, world.step_id(wf, "Work"))
    ]
    assert try_guard(world.host, session.id)


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_ac_a11_a_panicking_callback_is_recovered_and_logged(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A11 (and the Failure mode "A callback panics during dispatch"): an action raising a
    stray exception (Python's panic) during a real R1 failure is recovered: the turn returns
    normally, one ERROR carries the task and session ids (laneway's dispatch recovers it at
    its engine call, so it is the AC-E5 ERROR: Python has no separate panic channel), the
    failure bookkeeping stands, the guard is free, and a later failure of the same session
    still dispatches."""
    wf = world.board([act("ae_boom")])
    task = world.task(wf)
    session = world.session(task, world.crashing(status=5))

    outcome = world.turn(session)

    assert outcome.route == "R1"
    errors = with_fields(laneway_logs, "ERROR", task_id=task.id, session_id=session.id)
    assert len(errors) == 1
    assert world.host.sessions.get(session.id).metadata["last_agent_error"]["route"] == "R1"
    assert world.host.tasks.get(task.id).state == "REVIEW"
    assert try_guard(world.host, session.id)

    # the host keeps serving: a second execution of the session fails and is handled alike
    world.probe.seen.clear()
    laneway_logs.clear()
    world.fail(task, session, agent_execution_id="exec-after-panic")
    assert len(with_fields(laneway_logs, "ERROR", task_id=task.id, session_id=session.id)) == 1


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_ac_a11_a_panic_in_the_closure_is_recovered_and_is_not_a_dispatch_record(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A11: an exception escaping anywhere in the dispatch closure - here a plugin's
    agent-failure observer (`laneway_agent_failed`), which runs in the same closure after the
    dispatch - is recovered by the closure: ERROR with task and session ids, the turn returns,
    and that ERROR is not a dispatch record (the dispatch's own record is still its one INFO)."""
    world.probe.hook_raises = True
    wf = world.board([probe("recover")])
    task = world.task(wf)
    session = world.session(task, world.crashing(status=6))

    outcome = world.turn(session)

    assert outcome.route == "R1"
    assert len(world.probe.on_agent_error()) == 1
    errors = with_fields(laneway_logs, "ERROR", task_id=task.id, session_id=session.id)
    assert len(errors) == 1
    assert "event" not in errors[0]["extra"]
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]
    assert try_guard(world.host, session.id)


def test_concurrency_two_executions_of_one_session_fail_concurrently(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """Concurrency, "Two failures, same session": the guard serializes the bookkeeping and is
    released before each dispatch, so two failures of distinct executions delivered at once
    both dispatch (distinct operation ids) and neither blocks the other."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    session = world.session(task, world.scripted("a", "worker"))
    start = threading.Barrier(2)

    def deliver(execution: str) -> None:
        start.wait(10)
        world.fail(task, session, agent_execution_id=execution)

    outs = [background(lambda e=e: deliver(e)) for e in ("exec-a", "exec-b")]
    for out in outs:
        wait_for(out, 30)

    ops = sorted(s["operation_id"] for s in world.probe.on_agent_error())
    assert ops == [
        f"agent_error:session:{session.id}:exec-a",
        f"agent_error:session:{session.id}:exec-b",
    ]
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO", "INFO"]
    assert try_guard(world.host, session.id)
