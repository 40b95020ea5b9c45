"""Issue 38, "What a user hits first", items 1 to 6, on both databases: what the start step
declares for its agent's session reaches the first turn, a comment does not wake its own
author and the runaway-loop limit bounds trigger-driven runs, a failing heartbeat fails once
per slot, typo'd kinds are named, a run's queued triggers are delivered by its worker, and
`runs retry` refuses what would queue nothing useful."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


PING_PONG = """
id: pingpong
name: Ping Pong
max_step_arrivals: 3
steps:
  - id: work
    name: Work
    position: 0
    is_start_step: true
    allow_manual_move: true
    events:
      on_comment:
        - type: queue_run_for_each_participant
          config: {role: collaborator, reason: task_comment}
"""


def _asked(host: Any, task_id: str, agent_id: str) -> int:
    """How many times a run of the agent was asked for (a coalesced request counts too)."""
    return sum(
        r.coalesced_count for r in host.runs.list(task=task_id) if r.agent_profile_id == agent_id
    )


def test_issue_38_item_2_an_agents_comment_wakes_the_others_not_itself_and_the_loop_is_bounded(
    db_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """Two agents seated at a step that wakes its workers on every comment: an agent's own
    comment wakes the other one, never itself; and their back-and-forth is bounded by the
    runaway-loop limit (3 here), which stops it with one WARNING and HALTED, until a person's
    move resumes it. A person's comment wakes everyone and is not counted."""
    with open_host(db_url) as host:
        [wf] = host.workflows.import_text(PING_PONG, source="pingpong.yml")
        ping = host.profiles.add("ping", command=["true"]).id
        pong = host.profiles.add("pong", command=["true"]).id
        for name in ("ping", "pong"):
            host.participants.add(step="Work", role="collaborator", profile=name, workflow=wf.id)
        task = host.tasks.create(workflow=wf.id, title="talk").id

        host.comments.add(task, "go", author="user")  # a person: both, uncounted
        assert (_asked(host, task, ping), _asked(host, task, pong)) == (1, 1)
        host.comments.add(task, "ping!", author="ping", by_agent=ping)
        assert (_asked(host, task, ping), _asked(host, task, pong)) == (1, 2)

        for n in range(6):  # the agents answer each other: 2 more wakes, then the limit
            who, name = (pong, "pong") if n % 2 == 0 else (ping, "ping")
            host.comments.add(task, f"{name} says {n}", author=name, by_agent=who)
        assert _asked(host, task, ping) + _asked(host, task, pong) == 2 + 3
        assert host.tasks.get(task).loop_halted_step_id == wf.step("Work").id  # type: ignore[union-attr]
        halted = [r for r in laneway_logs if r["level"] == "WARNING" and "runaway" in r["message"]]
        assert len(halted) == 1
        assert halted[0]["extra"]["task_id"] == task

        host.tasks.move(task, "Work")  # a person's move: the counts start afresh
        host.comments.add(task, "again", author="ping", by_agent=ping)
        assert _asked(host, task, ping) + _asked(host, task, pong) == 2 + 3 + 1
