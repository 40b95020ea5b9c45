"""Issue 45 item 1: a worker's turn takes its agent's profile from what the process keeps
(`ProfileService.current`, no read a turn), and forgets it when the board's catalogue moves:
a profile changed by another process between two runs is what the next run's turn uses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.agents import worker
from core.host import Host
from core.runs import RunRequest
from core.store import tables as t
from tests.conftest import one_step_workflow, open_host


def _said(host: Host, run_id: str) -> list[str]:
    items = t.transcript_items
    with host.store.read() as conn:
        return list(
            conn.execute(
                sa.select(items.c.text)
                .where(items.c.run_id == run_id, items.c.kind == "output")
                .order_by(items.c.seq)
            ).scalars()
        )


def _run(host: Host, agent: str, task: str, step: str, watch: worker.CancelWatch) -> str:
    host.runs.enqueue(
        RunRequest(
            agent_profile_id=agent,
            task_id=task,
            workflow_step_id=step,
            reason="test",
            coalesce_exempt=True,
        )
    )
    run = worker.claim_next(host)
    assert run is not None
    assert worker.execute(host, run, watch).ok
    return run.id


@pytest.mark.slow  # it starts exec agents: the subprocess tier
@pytest.mark.one_database  # what it proves is this process's cache, not the database
def test_issue_45_item_1_a_profile_changed_elsewhere_reaches_the_next_turn(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    wf = one_step_workflow(host, tmp_path, prompt="Do it.")
    task = host.tasks.create(workflow=wf.id, title="t", description="A task.")
    step = str(task.workflow_step_id)
    say = [sys.executable, "-c", "print('first command')"]
    agent = host.profiles.add("sayer", command=say).id
    watch = worker.CancelWatch(host)
    try:
        first = _run(host, agent, task.id, step, watch)
        # another process changes the agent's command between the two runs
        with open_host(db_url) as other:
            other.profiles.set("sayer", command=[sys.executable, "-c", "print('second')"])
        second = _run(host, agent, task.id, step, watch)
    finally:
        watch.close()
        host.runtime.close()
    assert _said(host, first) == ["first command"]
    assert _said(host, second) == ["second"]
