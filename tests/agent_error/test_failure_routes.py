"""AC-A1, AC-A2, AC-A8, AC-A9, AC-A10: which failure routes of the agent runtime dispatch
on_agent_error, driven through REAL agent subprocesses.

Route mapping (DESIGN.md): R1 the agent process exits with a terminal status; R2 its command
cannot start; R3 its profile requires an environment variable that is unset (missing
credentials); R4 transient failures (exit 75) exhaust the retries; R5 a retry cannot start;
R6 the user cancels the retry loop (`AgentRuntime.cancel_retry`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from core.model import AgentProfile
from tests.agent_error.helpers import (
    World,
    act,
    background,
    dispatch_records,
    probe,
    wait_for,
)

# every test here runs a real agent process (the tier audit, tests/conftest.py)
pytestmark = pytest.mark.subprocess

UNSET_CREDENTIAL = "LANEWAY_AE_TEST_CREDENTIAL_NEVER_SET"

RECOVERY = [probe("recover"), act("move_to_next")]


def _profile_for(world: World, route: str) -> AgentProfile:
    """A profile whose single turn ends by `route`, as a real subprocess would."""
    if route == "R1":
        return world.scripted("r1-agent", "exit", "--status", "3")
    if route == "R2":
        return world.host.profiles.add("r2-agent", command=[str(world.tmp / "no-such-agent")])
    if route == "R3":
        return world.scripted("r3-agent", "worker", requires_env=[UNSET_CREDENTIAL])
    if route == "R4":
        state = world.state_file("r4")
        return world.scripted("r4-agent", "transient", "--times", "10", "--state", state)
    if route == "R5":
        # R5's shape: the command is an executable script that deletes itself on its first run
        # and then fails transiently (exit 75); the retry finds no command to start.
        return world.script(
            "r5-agent",
            """
            rm -f "$0"
            echo "provider overloaded" >&2
            exit 75
            """,
        )
    raise AssertionError(route)


@pytest.mark.parametrize("route", ["R1", "R2", "R3", "R4", "R5"])
def test_ac_a2_ac_a9_every_terminal_route_dispatches(
    world: World, laneway_logs: list[dict[str, Any]], route: str
) -> None:
    """AC-A2 (and AC-A9 for R4/R5): routes R1-R5 each dispatch on_agent_error once, through
    a real agent process; the step's recovery move then lands the task at Recover."""
    if route == "R3":
        assert UNSET_CREDENTIAL not in os.environ
    wf = world.board(RECOVERY)
    task = world.task(wf)
    session = world.session(task, _profile_for(world, route))

    outcome = world.turn(session)

    assert outcome.ok is False
    assert outcome.route == route
    seen = world.probe.on_agent_error()
    assert len(seen) == 1, f"{route} must dispatch exactly once"
    assert seen[0]["task_id"] == task.id
    assert seen[0]["payload"]["failed_session_id"] == session.id
    assert world.step_name(task.id) == "Recover"
    infos = dispatch_records(laneway_logs, task_id=task.id, session_id=session.id)
    assert [r["level"] for r in infos] == ["INFO"]
    assert world.probe.failures[-1].user_initiated is False
    if route == "R4":  # AC-A9: two retries (tiny delays), then the loop gives up
        retries = [r for r in laneway_logs if r["extra"].get("session_id") == session.id]
        assert [r["extra"]["attempt"] for r in retries if "attempt" in r["extra"]] == [1, 2]


def test_ac_a1_terminal_failure_dispatches_for_the_task_and_failed_session(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A1: a terminal failure (R1, a real process exiting 3) of a session on a non-Office
    task dispatches on_agent_error for that task, against the session that failed: the
    actions see that task at its step and that session, and the record names both."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    session = world.session(task, world.crashing(status=3))

    world.turn(session)

    (seen,) = world.probe.on_agent_error()
    assert seen["task_id"] == task.id
    assert seen["step_id"] == world.step_id(wf, "Work")
    assert seen["session_id"] == session.id
    assert seen["payload"]["failed_session_id"] == session.id
    (record,) = dispatch_records(laneway_logs)
    assert record["extra"]["task_id"] == task.id
    assert record["extra"]["session_id"] == session.id


def test_ac_a1_actions_act_on_the_failed_session_not_the_primary_one(world: World) -> None:
    """AC-A1: the dispatch is "against the session that failed". With two sessions laneway
    runs on one task (the failing agent's, older, and a newer primary one that is idle, so
    AC-F5 does not skip), the session-scoped actions the step declares under on_agent_error
    must act on the failed session (Go: callbacks act on `in.State.SessionID`, the failed
    session), not on whichever session is the task's primary one."""
    wf = world.board([act("set_workflow_data", key="recovered", value="yes"), probe("recover")])
    task = world.task(wf)
    failing = world.session(task, world.crashing(status=3))
    other = world.session(task, world.scripted("idle", "worker"))  # newer: now primary

    world.turn(failing)

    (seen,) = world.probe.on_agent_error()
    assert seen["payload"]["failed_session_id"] == failing.id
    assert world.host.sessions.get(failing.id).metadata.get("workflow_data") == {"recovered": "yes"}
    assert "workflow_data" not in world.host.sessions.get(other.id).metadata
    assert seen["session_id"] == failing.id


def test_ac_a8_user_cancel_of_the_retry_loop_does_not_dispatch(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A8 (route R6, real process): the user cancels a transient retry loop; no dispatch,
    one DEBUG record of the dispatch (carrying the route), and no later record."""
    wf = world.board(RECOVERY)
    task = world.task(wf)
    state = world.state_file("cancelled")
    agent = world.scripted("flaky", "transient", "--times", "10", "--state", state)
    session = world.session(task, agent)
    world.host.runtime.retry_delays = (30.0, 30.0)  # the loop waits; the cancel ends it

    out = background(lambda: world.turn(session))
    deadline = time.monotonic() + 20
    while not world.host.runtime.cancel_retry(session.id):
        assert time.monotonic() < deadline, "the turn never started"
        time.sleep(0.01)
    finished = wait_for(out, 30)

    assert finished.route == "R6"
    assert world.probe.on_agent_error() == []
    assert world.step_name(task.id) == "Work"
    records = dispatch_records(laneway_logs)
    assert [r["level"] for r in records] == ["DEBUG"]
    assert records[0]["extra"]["task_id"] == task.id
    assert records[0]["extra"]["session_id"] == session.id
    assert records[0]["extra"]["route"] == "R6"


@pytest.mark.parametrize(
    ("route", "message", "user_initiated", "dispatches"),
    [
        ("R6", "the user cancelled the retries", False, True),
        ("R1", "agent exited with status 1", True, False),
        ("R4", "", True, False),
    ],
)
def test_ac_a8_user_initiated_is_an_explicit_field_never_inferred(
    world: World,
    laneway_logs: list[dict[str, Any]],
    route: str,
    message: str,
    user_initiated: bool,
    dispatches: bool,
) -> None:
    """AC-A8: the R6 signal is the explicit `AgentFailure.user_initiated` field (default
    False), never inferred from the route, the message or a missing execution id: a failure
    that looks like R6 but is not flagged dispatches; a flagged one never does."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    session = world.session(task, world.scripted("a", "worker"))

    world.fail(task, session, route=route, error_message=message, user_initiated=user_initiated)

    assert len(world.probe.on_agent_error()) == (1 if dispatches else 0)
    levels = [r["level"] for r in dispatch_records(laneway_logs)]
    assert levels == (["INFO"] if dispatches else ["DEBUG"])


def test_ac_a10_a_cancel_during_the_last_attempt_does_not_leak_into_r4(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A10: the user cancels while the final retry attempt is already running (the
    laneway counterpart of a timer that already claimed its entry). That attempt still ends
    by R4 and R4 dispatches, with `user_initiated` at its default False: the cancel's marker
    never rides on another delivery. At most one dispatch for the pair, never two.

    Real processes: a script that takes a moment and then exits 75; one retry."""
    wf = world.board(RECOVERY)
    task = world.task(wf)
    agent = world.script(
        "slow-flaky",
        """
        sleep 0.6
        echo "provider overloaded" >&2
        exit 75
        """,
    )
    session = world.session(task, agent)
    world.host.runtime.retry_delays = (0.01,)
    retrying = threading.Event()

    def watch(message: Any) -> None:
        if message.record["extra"].get("attempt") == 1:
            retrying.set()

    from loguru import logger

    handler = logger.add(watch, level="WARNING")
    try:
        out = background(lambda: world.turn(session))
        assert retrying.wait(30), "the first attempt never failed transiently"
        time.sleep(0.2)  # the retry's wait (10 ms) is over: the last attempt is running
        assert world.host.runtime.cancel_retry(session.id)
        outcome = wait_for(out, 30)
    finally:
        logger.remove(handler)

    dispatched = world.probe.on_agent_error()
    assert len(dispatched) <= 1
    assert outcome.route in ("R4", "R6")
    if outcome.route == "R4":
        assert len(dispatched) == 1, "R4 after a concurrent cancel must still dispatch"
        assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]
        assert world.probe.failures[-1].user_initiated is False
    else:  # the cancel outran the attempt: zero, which AC-B5 names as legitimate
        assert dispatched == []
