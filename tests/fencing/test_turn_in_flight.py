"""Issue 27 item 6: whether a session's turn is in flight is read from the database, not from the
moving process's memory (`core/agents/session.py`).

Two hosts on one board are two processes to each other (each its own epoch, runtime and
memory). AC-D1's stale-RUNNING flip still happens where no turn runs anywhere (a RUNNING session
with no claimed run, or one claimed by a dead epoch); a move made by host B while host A's
worker runs the session's turn leaves it RUNNING, so on-agent-error AC-F5 (another session of
the task is working: no dispatch) still holds for a sibling's failure reported by B. The second
test fails on the main this branch started from (B's move flipped A's working session).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from core import Host
from core.agents import failure as agent_error
from core.agents import worker
from core.model import AgentFailure
from core.runs import RunRequest
from core.store import tables as t
from tests.conftest import open_host

WAIT_S = 30.0


def _board(host: Host, agent_command: list[str]) -> tuple[str, str, str]:
    """A kanban task at the simple workflow's first step with an agent session: (task, session,
    agent)."""
    wf = host.workflows.create_from_template("simple")
    agent = host.profiles.add("worker", command=agent_command).id
    task = host.tasks.create(workflow=wf.id, title="t").id
    session = host.sessions.start(task, profile=agent, external=False).id
    return task, session, agent


def _other_step(host: Host, task: str) -> str:
    placed = host.tasks.get(task)
    assert placed.workflow_id is not None
    wf = host.workflows.by_id(placed.workflow_id)
    return next(s.name for s in wf.steps if s.id != placed.workflow_step_id)


def _until(probe: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_ac_d1_a_running_session_with_no_turn_anywhere_still_flips(db_url: str) -> None:
    """Item 6 / AC-D1: a session left RUNNING with no run claimed for it (or one claimed by a
    dead epoch) flips to WAITING_FOR_INPUT on the next arrival, whichever process moves."""
    with open_host(db_url) as a:
        task, session, agent = _board(a, ["true"])
        a.sessions.set_state(session, "RUNNING")
        run = a.runs.enqueue(
            RunRequest(agent, task, a.tasks.get(task).workflow_step_id, "t", coalesce_exempt=True)
        ).run_id
        with a.store.transaction() as uow:
            uow.conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id == run)
                .values(status="claimed", claimed_epoch="dead0000dead0000dead0000dead0000")
            )
    with open_host(db_url) as b:
        b.tasks.move(task, _other_step(b, task))
        assert b.sessions.get(session).state == "WAITING_FOR_INPUT"


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_item6_a_move_from_another_process_leaves_a_working_session_running(
    db_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """Item 6 / AC-F5 across processes: host A's worker runs a turn on the session; host B
    moves the task: the session stays RUNNING, and a sibling session's failure reported by B
    is not dispatched (another session of the task is working)."""
    sleeper = [sys.executable, "-c", "import sys, time; sys.stdin.read(); time.sleep(60)"]
    with open_host(db_url) as a, open_host(db_url) as b:
        task, session, agent = _board(a, sleeper)
        run = a.runs.enqueue(
            RunRequest(agent, task, a.tasks.get(task).workflow_step_id, "t", coalesce_exempt=True)
        ).run_id
        working = threading.Thread(target=worker.work, args=(a,), kwargs={"once": True})
        working.start()
        try:
            _until(lambda: b.sessions.get(session).state == "RUNNING", "the turn to start")
            b.tasks.move(task, _other_step(b, task))
            assert b.sessions.get(session).state == "RUNNING"

            sibling = b.profiles.add("sibling", command=["false"]).id
            other = b.sessions.start(task, profile=sibling, external=False).id
            dispatched = agent_error.dispatch(b, AgentFailure(task, other, "R1", "boom"))
            assert dispatched is False
            blocked = [r for r in laneway_logs if r["extra"].get("blocking_session_id") == session]
            assert len(blocked) == 1
        finally:
            b.runs.cancel(run)
            working.join(WAIT_S)
        assert not working.is_alive()
