"""Issue 38, items 1 and 5, with a real `laneway worker --once` process and exec agents, on
both databases: what the start step declares for its agent's session reaches the first turn
of a created-and-started task, and a trigger a run queues is delivered by its own worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.store import tables as t
from tests.agents.conftest import inspect_host, laneway, python_agent
from tests.conftest import open_host

pytestmark = pytest.mark.slow

SPEND = """
id: spend
name: Spend
steps:
  - id: work
    name: Work
    position: 0
    is_start_step: true
    allow_manual_move: true
    prompt: "spend"
    events:
      on_budget_alert:
        - type: move_to_step
          config: {step_id: over}
  - id: over
    name: Over budget
    position: 1
    allow_manual_move: true
"""


def test_issue_38_item_5_worker_once_delivers_the_budget_alert_its_run_queued(
    db_url: str, tmp_path: Path
) -> None:
    """An exec agent reports usage past its task's budget: the alert its report queued is
    delivered by the same `worker --once` after the run's commit (the task is at Over budget
    when the worker exits), not left in the outbox for a later pass or `laneway recover`."""
    path = tmp_path / "spend.yml"
    path.write_text(SPEND)
    spender = python_agent(
        "import sys, json; sys.stdin.read(); print(json.dumps({'usage': {'cost_usd': 2.5}}))"
    )
    with open_host(db_url) as host:
        (wf,) = host.workflows.import_file(path)
        host.profiles.add("spender", command=spender)
        host.participants.add(step="Work", role="runner", profile="spender", workflow=wf.id)
        task = host.tasks.create(workflow=wf.id, title="costly")
        host.budgets.set(scope="task", ref=task.id, limit_usd=1.0, thresholds=[100])
        host.tasks.start(task.id)

    done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    with inspect_host(db_url) as host:
        moved = host.tasks.get(task.id)
        assert host.workflows.step_by_id(moved.workflow_step_id or "")[1].name == "Over budget"
        with host.store.read() as conn:
            assert (
                conn.execute(sa.select(sa.func.count()).select_from(t.trigger_outbox)).scalar() == 0
            )
        (run,) = host.runs.list(task=task.id)
        assert (run.status, run.usage and run.usage["cost_usd"]) == ("finished", 2.5)


PLAN_AND_BUILD_LIKE = """
id: plan
name: Plan first
steps:
  - id: plan
    name: Plan
    position: 0
    is_start_step: true
    allow_manual_move: true
    prompt: "plan it"
    events:
      on_enter:
        - type: enable_plan_mode
        - type: set_session_mode
          config: {mode: architect}
        - type: auto_start_agent
  - id: done
    name: Done
    position: 1
    allow_manual_move: true
"""


def test_issue_38_item_1_a_created_and_started_task_gets_the_start_steps_session_kinds(
    db_url: str, tmp_path: Path
) -> None:
    """`task create` then `task start` at the start step is no arrival (E5 changes no step),
    yet the step's session kinds reach the first turn: the exec agent sees plan mode and the
    mode, exactly as for a task moved there."""
    path = tmp_path / "plan.yml"
    path.write_text(PLAN_AND_BUILD_LIKE)
    seen = tmp_path / "seen.jsonl"
    probe = python_agent(
        "import sys, os, json; sys.stdin.read(); "
        f"open({str(seen)!r}, 'a').write(json.dumps({{k: os.environ.get(k) for k in "
        "('LANEWAY_PLAN_MODE', 'LANEWAY_SESSION_MODE', 'LANEWAY_TASK_ID')}) + '\\n')"
    )
    with open_host(db_url) as host:
        (wf,) = host.workflows.import_file(path)
        host.profiles.add("planner", command=probe)
        host.participants.add(step="Plan", role="runner", profile="planner", workflow=wf.id)
    created = json.loads(
        laneway(
            "--db",
            db_url,
            "--json",
            "task",
            "create",
            "--workflow",
            "Plan first",
            "--title",
            "t",
            cwd=tmp_path,
        ).stdout
    )
    started = laneway("--db", db_url, "task", "start", created["id"], cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    (turn,) = [json.loads(line) for line in seen.read_text().splitlines()]
    assert turn == {
        "LANEWAY_PLAN_MODE": "1",
        "LANEWAY_SESSION_MODE": "architect",
        "LANEWAY_TASK_ID": created["id"],
    }


@pytest.mark.one_database
def test_issue_38_item_1_an_acp_agent_started_in_place_runs_its_first_turn_in_the_steps_mode(
    db_url: str, tmp_path: Path
) -> None:
    """The issue's own evidence, with the fake ACP agent reporting its mode: a task moved to
    the start step (Board's, from Backlog) and one created there and started both run their
    first turn in the mode the step declares (`mode: plan`, not `mode: default`)."""
    from tests.agents.test_acp_worker import STATE, Board, messages

    board = Board(
        db_url,
        tmp_path,
        {"modes": ["default", "plan"], "turns": [STATE]},
        on_enter=[{"type": "set_session_mode", "config": {"mode": "plan"}}],
    )
    with open_host(db_url) as host:
        task = host.tasks.get(board.task_id)
        in_place = host.tasks.create(workflow=task.workflow_id or "", title="created at Work")
        assert host.workflows.step_by_id(in_place.workflow_step_id or "")[1].name == "Work"
        host.tasks.start(in_place.id)
    board.work()
    with open_host(db_url, read_only=True) as host:
        for task_id in (board.task_id, in_place.id):
            first = host.sessions.list(task=task_id)[0]
            items = host.sessions.items(first.id, limit=1000)
            said = messages([{"kind": i.kind, "text": i.text} for i in items])
            assert said.split("state: ")[1].startswith("mode=plan"), (task_id, said)
