"""A worker's second interrupt (`kill_all`, run by its signal handler in the main thread)
that comes while a turn is beginning on another thread still stops that turn: its agent is
not left to run out its own time, and the run goes back to the queue (CLI.md `laneway worker`:
"a second Ctrl-C kills the agents at once").

Each test puts the interrupt into the one window a turn passes through before `kill_all` can
see it: an exec turn being entered among the turns in flight, and an ACP agent started but not
yet shown as running its turn."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.agents import worker
from core.agents.stops import InFlight, LiveTurn
from core.agents.values import TurnOutcome
from core.host import Host
from tests.agents.conftest import enqueue, plain_workflow, run_rows, sleeper
from tests.agents.test_acp_worker import FAKE

pytestmark = pytest.mark.slow

AGENT_SLEEPS_S = 120.0
"""Longer than the wait below: a turn ended within it was stopped, not run out."""
ENDED_WITHIN_S = 40.0


def _work_until_shutdown(host: Host, stop: threading.Event) -> tuple[float, list[TurnOutcome]]:
    """`work` on a thread, as the worker's turns run; how long it took, and its outcomes."""
    outcomes: list[TurnOutcome] = []
    done = threading.Event()

    def progress(event: str, _run: Any, outcome: TurnOutcome | None) -> None:
        if outcome is not None:
            outcomes.append(outcome)

    def run() -> None:
        try:
            worker.work(host, once=True, stop=stop, progress=progress)
        finally:
            done.set()

    began = time.monotonic()
    thread = threading.Thread(target=run, name="test-worker")
    thread.start()
    try:
        ended = done.wait(ENDED_WITHIN_S)
        took = time.monotonic() - began
    finally:
        if not done.is_set():  # the defect: stop what the interrupt missed, then fail
            host.runtime.in_flight.kill_all()
        thread.join(ENDED_WITHIN_S)
    assert ended, f"the turn ran on for {ENDED_WITHIN_S:g} s after the worker's kill_all"
    return took, outcomes


def _interrupted(in_flight: InFlight, stop: threading.Event) -> None:
    """What the worker's signal handlers do on a first and a second Ctrl-C."""
    stop.set()
    in_flight.kill_all()


def test_a_kill_all_as_an_exec_turn_is_entered_stops_it(host: Host, tmp_path: Path) -> None:
    """The interrupt lands just before the turn is entered among the turns in flight."""
    wf = plain_workflow(host, tmp_path)
    agent = host.profiles.add("sleepy", command=sleeper(AGENT_SLEEPS_S)).id
    task = host.tasks.create(workflow=wf, title="t").id
    enqueue(host, agent, task)
    in_flight = host.runtime.in_flight
    stop = threading.Event()

    class InterruptedAsEntered(dict[str, LiveTurn]):
        def __setitem__(self, session_id: str, turn: LiveTurn) -> None:
            _interrupted(in_flight, stop)
            super().__setitem__(session_id, turn)

    in_flight.turns = InterruptedAsEntered()
    took, outcomes = _work_until_shutdown(host, stop)
    assert [(o.cancelled, o.stopped) for o in outcomes] == [(True, "shutdown")]
    (row,) = run_rows(host.store.url)
    assert (row["status"], row["attempts"]) == ("queued", 0)  # back for the next worker
    assert took < AGENT_SLEEPS_S


def test_a_kill_all_as_an_acp_agent_starts_stops_its_turn(host: Host, tmp_path: Path) -> None:
    """The interrupt lands after the ACP agent started and before its turn is shown running:
    `close_all` found nothing to close, so the agent is stopped as it is shown."""
    wf = plain_workflow(host, tmp_path)
    script = {"turns": [[{"sleep": AGENT_SLEEPS_S}, {"message": "ran it out"}]]}
    agent = host.profiles.add(
        "sleepy-acp",
        command=[sys.executable, FAKE],
        protocol="acp",
        env={"FAKE_ACP_SCRIPT": json.dumps(script)},
    ).id
    task = host.tasks.create(workflow=wf, title="t").id
    enqueue(host, agent, task)
    in_flight = host.runtime.in_flight
    stop = threading.Event()
    conversations = host.runtime.acp.conversations
    start = conversations.start

    def start_then_interrupted(*args: Any, **kwargs: Any) -> Any:
        conn = start(*args, **kwargs)
        _interrupted(in_flight, stop)
        return conn

    conversations.start = start_then_interrupted  # type: ignore[method-assign]
    took, outcomes = _work_until_shutdown(host, stop)
    assert [(o.cancelled, o.stopped) for o in outcomes] == [(True, "shutdown")]
    (row,) = run_rows(host.store.url)
    assert (row["status"], row["attempts"]) == ("queued", 0)
    assert took < AGENT_SLEEPS_S
    texts = [i.text for s in host.sessions.list(task=task) for i in host.sessions.items(s.id)]
    assert "ran it out" not in texts
