"""Issue 39 item 8: a worker that ends a turn with its claim lost says one outcome for the run
in its log - that it gave the run up (with the turn's `ok`) - and never "run finished" after
it; a real exec agent, both databases."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from core import worker
from core.runs import RunRequest
from tests.conftest import open_host
from tests.fencing.test_fencing import take_lock_away

pytestmark = pytest.mark.subprocess  # its agent is a real process


def test_issue_39_item_8_a_run_whose_claim_was_lost_is_logged_given_up_not_finished(
    db_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    with open_host(db_url) as a, open_host(db_url) as b:
        wf = a.workflows.create_from_template("simple")
        agent = a.profiles.add(
            "quick", command=[sys.executable, "-c", "import sys; sys.stdin.read()"]
        )
        task = a.tasks.create(workflow=wf.id, title="t").id
        step = a.tasks.get(task).workflow_step_id
        a.runs.enqueue(RunRequest(agent.id, task, step, "t", coalesce_exempt=True))
        run = worker.claim_next(a)
        assert run is not None
        take_lock_away(a)  # A is declared dead while it works; B takes the run meanwhile
        assert [r.id for r in worker.requeue_orphans(b).requeued] == [run.id]
        assert worker.claim_next(b) is not None

        worker.execute(a, run)

    ends = [r for r in laneway_logs if r["extra"].get("run_id") == run.id and "ok" in r["extra"]]
    assert len(ends) == 1, [r["message"] for r in ends]
    (end,) = ends
    assert end["level"] == "WARNING"
    assert end["extra"]["reason"] == "claim_lost"
    assert end["message"].startswith(("run given up", "run not finished"))
    assert not [r for r in laneway_logs if r["message"] == "run finished"]
