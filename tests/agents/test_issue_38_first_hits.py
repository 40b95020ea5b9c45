"""Issue 38, "What a user hits first", items 1 to 6, on both databases: what the start step
declares for its agent's session reaches the first turn, a comment does not wake its own
author and the runaway-loop limit bounds trigger-driven runs, a failing heartbeat fails once
per slot, typo'd kinds are named, a run's queued triggers are delivered by its worker, and
`runs retry` refuses what would queue nothing useful."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import Conflict
from tests.agents.conftest import enqueue, plain_workflow, set_run, sleeper
from tests.conftest import open_host


def test_issue_38_item_6_retry_refuses_a_run_whose_task_left_its_step_and_a_second_retry(
    db_url: str, tmp_path: Path
) -> None:
    """`runs retry` of a run whose task has since left the run's step would queue a run the
    claim cancels unrun: refused, in one line naming the step. A run already retried is
    refused the second time, naming its retry."""
    with open_host(db_url) as host:
        workflow = plain_workflow(host, tmp_path)
        task = host.tasks.create(workflow=workflow, title="T").id
        agent = host.profiles.add("agent", command=sleeper(0)).id
        left = enqueue(host, agent, task)
        host.runs.cancel(left)
        twice = enqueue(host, agent, task)
        set_run(host, twice, status="failed", claimed_epoch=host.epoch)

        again = host.runs.retry(twice)
        assert again.retry_of == twice
        with pytest.raises(Conflict) as refused:
            host.runs.retry(twice)
        assert str(refused.value) == f"run {twice} was already retried: run {again.id} is its retry"

        host.tasks.move(task, "Doing")
        with pytest.raises(Conflict) as refused:
            host.runs.retry(left)
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(f"run {left} was for step 'Todo', which its task has left")
        assert [r.id for r in host.runs.list(task=task) if r.status == "queued"] == [again.id]
