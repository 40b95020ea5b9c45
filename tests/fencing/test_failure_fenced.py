"""An agent failure's bookkeeping is written under the run's fence, in one transaction: a
worker that loses the run's claim after its fence passed, while another worker re-queues and
re-claims the run and starts its turn, does not write its failure over that turn (the session
back to WAITING_FOR_INPUT under a RUNNING turn of another worker). The fence used to be
checked in a transaction of its own, the states written after it unfenced."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from core.agents import failure as agent_error
from core.agents import worker
from core.model import AgentFailure
from core.runs import RunRequest
from tests.conftest import open_host
from tests.fencing.test_fencing import take_lock_away

HELD_S = 60.0
TAKEOVER_ALONE_S = 2.0
"""How long the takeover is given while the failing worker is held after its fence (it
cannot finish: it waits for the run's row; before the fix it finished well within this)."""


def test_a_failure_whose_claim_is_taken_midway_writes_nothing_over_the_new_turn(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_host(db_url) as a, open_host(db_url) as b:
        wf = a.workflows.create_from_template("simple")
        agent = a.profiles.add("worker", command=["agent"]).id
        task = a.tasks.create(workflow=wf.id, title="t").id
        session = a.sessions.start(task, profile=agent, external=False).id
        a.runs.enqueue(
            RunRequest(agent, task, a.tasks.get(task).workflow_step_id, "t", coalesce_exempt=True)
        )
        run = worker.claim_next(a)
        assert run is not None
        a.sessions.set_state(session, "RUNNING")

        deciding, go = threading.Event(), threading.Event()
        decide = agent_error.decide

        def held_decide(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name == "failing":
                deciding.set()
                go.wait(HELD_S)
            return decide(*args, **kwargs)

        monkeypatch.setattr(agent_error, "decide", held_decide)
        failure = AgentFailure(task, session, "R1", "boom", run_id=run.id)
        failing = threading.Thread(target=lambda: a.runtime.handle_failure(failure), name="failing")

        def take_over() -> None:
            take_lock_away(a)
            assert [r.id for r in worker.requeue_orphans(b).requeued] == [run.id]
            again = worker.claim_next(b)
            assert again is not None
            assert again.id == run.id
            b.sessions.set_state(session, "RUNNING")  # B's turn of the run begins

        taking_over = threading.Thread(target=take_over)
        failing.start()
        try:
            assert deciding.wait(HELD_S), "the failure never reached its decision"
            taking_over.start()
            taking_over.join(TAKEOVER_ALONE_S)
        finally:
            go.set()
        failing.join(HELD_S)
        taking_over.join(HELD_S)
        assert not failing.is_alive()
        assert not taking_over.is_alive()
        # B's turn runs: its session RUNNING, whatever A's failure wrote before B took over
        assert b.sessions.get(session).state == "RUNNING"
