"""AC-A1 and AC-A3 when reconciling the agent's completion signal fails: the signal an agent
gave before it failed is applied first, and when applying it raises (a `move_to_next` from the
last step; the destination's entry record cannot be written) the failure is logged and the
rest of terminal-failure handling still runs: the cleanup of the agent process is launched,
on_agent_error is dispatched, and plugins observing agent failures are told."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import sqlalchemy as sa

from core import ledger
from core.agents import worker
from core.agents.protocols import exec_process as process
from core.runs import RunRequest
from plugins.testing.logs import matching
from tests.agent_error.helpers import World, act, dispatch_records, probe

# every test here runs a real agent process (the tier audit, tests/conftest.py)
pytestmark = pytest.mark.subprocess

SIGNAL_THEN_CRASH = """
echo '{"step_complete": true}'
echo "crashed after signalling" >&2
exit 1
"""


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records each launched cleanup of an agent process (the kill still happens)."""
    seen: list[int] = []
    original = process.AgentProcess.kill

    def recording_kill(self: process.AgentProcess) -> None:
        seen.append(threading.get_ident())
        original(self)

    monkeypatch.setattr(process.AgentProcess, "kill", recording_kill)
    return seen


def _reconcile_errors(logs: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]]:
    return [
        r
        for r in logs
        if r["level"] == "ERROR"
        and r["extra"].get("session_id") == session_id
        and r["extra"].get("route") == "R1"
        and "cause" in r["extra"]
    ]


def test_ac_a1_ac_a3_a_signal_that_cannot_move_from_the_last_step_still_dispatches(
    world: World, laneway_logs: list[dict[str, Any]], kills: list[int]
) -> None:
    """AC-A1 / AC-A3: a real agent on the last step signals step_complete and crashes; the
    step's on_turn_complete is a move_to_next, which has no next step and raises. The failure
    is logged (one ERROR naming task, session and cause), nothing escapes the turn, the agent
    process's cleanup is launched, on_agent_error is dispatched on the step the task stands
    at, and the agent-failed observers run."""
    wf = world.flow(
        {
            "name": "Last",
            "position": 0,
            "is_start_step": True,
            "events": {
                "on_turn_complete": [act("move_to_next")],
                "on_agent_error": [probe("last")],
            },
        }
    )
    task = world.task(wf)
    session = world.session(task, world.script("signaller", SIGNAL_THEN_CRASH))

    outcome = world.turn(session)

    assert outcome.route == "R1"
    assert world.step_name(task.id) == "Last"
    assert world.probe.labels() == ["last"]
    assert [f.session_id for f in world.probe.failures] == [session.id]
    assert kills, "the agent process's cleanup was not launched"
    (error,) = _reconcile_errors(laneway_logs, session.id)
    assert error["extra"]["task_id"] == task.id
    assert "last step" in error["extra"]["cause"]
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]
    assert world.host.sessions.get(session.id).metadata.get("pending_step_signal") is None


def test_ac_a1_ac_a3_an_entry_record_that_cannot_be_written_still_dispatches(
    world: World,
    laneway_logs: list[dict[str, Any]],
    kills: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AC-A1 / AC-A3: the signal's move fails transiently (the destination's entry record
    cannot be written, so the step change is rolled back): the task stays, the failure is
    logged, and the dispatch, the cleanup and the observers still run."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise sa.exc.OperationalError("INSERT INTO step_entries ...", {}, Exception("disk full"))

    monkeypatch.setattr(ledger, "allocate", refuse)
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
        {"name": "Review", "position": 1, "events": {"on_enter": [probe("enter-review")]}},
    )
    task = world.task(wf)
    session = world.session(task, world.script("signaller", SIGNAL_THEN_CRASH))

    outcome = world.turn(session)

    assert outcome.route == "R1"
    assert world.step_name(task.id) == "Work"
    assert world.probe.labels() == ["work"]
    assert [f.session_id for f in world.probe.failures] == [session.id]
    assert kills
    (error,) = _reconcile_errors(laneway_logs, session.id)
    assert "entry record" in error["extra"]["cause"]


def test_ac_a1_through_the_worker_the_run_fails_cleanly_and_dispatches(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A1 through the worker: a claimed run whose agent signals on the last step and
    crashes ends `failed` with the agent's own error (not "run could not be executed"), and
    on_agent_error is dispatched."""
    wf = world.flow(
        {
            "name": "Last",
            "position": 0,
            "is_start_step": True,
            "events": {
                "on_turn_complete": [act("move_to_next")],
                "on_agent_error": [probe("last")],
            },
        }
    )
    task = world.task(wf)
    agent = world.script("signaller", SIGNAL_THEN_CRASH)
    world.host.runs.enqueue(RunRequest(agent.id, task.id, world.step_id(wf, "Last"), "x"))

    summary = worker.work(world.host, once=True)

    assert (summary.claimed, summary.failed) == (1, 1)
    (run,) = world.runs(task)
    assert run.status == "failed"
    assert "crashed after signalling" in (run.error_message or "")
    assert world.probe.labels() == ["last"]
    assert not matching(laneway_logs, "ERROR", run_id=run.id)  # the worker finished it cleanly
