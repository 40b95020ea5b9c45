"""An agent failure's bookkeeping is written under the run's fence, in one transaction: a
worker that loses the run's claim after its fence passed, while another worker re-queues and
re-claims the run and starts its turn, does not write its failure over that turn (the session
back to WAITING_FOR_INPUT under a RUNNING turn of another worker). The fence used to be
checked in a transaction of its own, the states written after it unfenced."""

from __future__ import annotations

import pytest

from core.agents import failure as agent_error
from core.agents import worker
from core.model import AgentFailure
from core.runs import RunRequest
from tests.conftest import open_host
from tests.fencing.test_fencing import take_lock_away
from tests.interleave import Hold, race


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

        hold = Hold()
        monkeypatch.setattr(agent_error, "decide", hold.before(agent_error.decide))
        failure = AgentFailure(task, session, "R1", "boom", run_id=run.id)

        def take_over() -> None:
            take_lock_away(a)
            assert [r.id for r in worker.requeue_orphans(b).requeued] == [run.id]
            again = worker.claim_next(b)
            assert again is not None
            assert again.id == run.id
            b.sessions.set_state(session, "RUNNING")  # B's turn of the run begins

        race(hold, lambda: a.runtime.handle_failure(failure), take_over)
        # B's turn runs: its session RUNNING, whatever A's failure wrote before B took over
        assert b.sessions.get(session).state == "RUNNING"
