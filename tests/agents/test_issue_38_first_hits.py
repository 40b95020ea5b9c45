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


FAILING_BEAT = """
id: beat
name: Beat
steps:
  - id: todo
    name: Todo
    position: 0
    is_start_step: true
  - id: watch
    name: Watching
    position: 1
    heartbeat_seconds: 60
    events:
      on_heartbeat:
        - type: queue_run
          config: {target: workspace.ceo_agent, reason: heartbeat}
"""


def test_issue_38_item_3_a_failing_heartbeat_fails_once_per_slot_and_check_warns(
    db_url: str,
) -> None:
    """A heartbeat whose action cannot resolve its target (no CEO on the board) fails once
    per slot: later passes of the same slot do not evaluate it again, the next slot does.
    `workflow check` warns about the target before any task gets there."""
    slot = 1_800_000_000 - (1_800_000_000 % 60)
    with open_host(db_url) as host:
        [wf] = host.workflows.import_text(FAILING_BEAT, source="beat.yml")
        warnings = host.workflows.warnings(wf)
        assert any(
            "step 'Watching'" in w
            and "queue_run target workspace.ceo_agent resolves to no agent today" in w
            and "no profile has role ceo" in w
            for w in warnings
        ), warnings
        task = host.tasks.create(workflow=wf.id, title="watched")
        host.tasks.move(task.id, "Watching")

        reports = [host.triggers.heartbeats(now=slot + s) for s in range(1, 8)]
        assert [r.failed for r in reports] == [1, 0, 0, 0, 0, 0, 0]
        assert host.triggers.heartbeats(now=slot + 60).failed == 1  # the next slot tries again
        assert host.triggers.heartbeats(now=slot + 61).failed == 0
