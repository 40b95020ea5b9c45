"""Issue 38 item 14: a message sent to a task at Review on the `simple` (Kanban) board makes
one turn. The message's turn start moves the card back to In Progress (Review's
on_turn_start: move_to_previous), and In Progress's auto_start_agent must not queue the
task's prompt as a second turn: the turn starting is the agent's turn."""

from __future__ import annotations

import pytest

from core.agents import worker
from tests.agents.conftest import python_agent
from tests.conftest import open_host

ECHO = python_agent("import sys; print('got:' + sys.stdin.read()[:40])")


@pytest.mark.slow
def test_issue_38_item_14_a_message_at_review_makes_one_turn(db_url: str) -> None:
    with open_host(db_url) as host:
        wf = host.workflows.create_from_template("simple")
        steps = {s.name: s.id for s in wf.steps}
        host.profiles.add("echo", command=ECHO)
        host.participants.add(
            workflow=wf.id, step=steps["In Progress"], role="runner", profile="echo"
        )
        task = host.tasks.create(workflow=wf.id, title="talk to me", description="the job")
        host.tasks.start(task.id)
        first = worker.work(host, once=True)
        assert first.as_dict() == {"claimed": 1, "finished": 1, "failed": 0}
        # the finished turn moved the card to Review
        assert host.tasks.get(task.id).workflow_step_id == steps["Review"]
        session = host.sessions.live(task.id)
        assert session is not None

        host.sessions.send(session.id, "also fix the typo")
        second = worker.work(host, once=True)

        reasons = [r.reason for r in host.runs.list(task=task.id)]
        # the task's own run, then the message's: no task_assigned run for the move back
        assert reasons == ["task_assigned", "user_message"], reasons
        assert second.as_dict() == {"claimed": 1, "finished": 1, "failed": 0}
        said = [i.text[:8] for i in host.sessions.items(session.id) if i.kind == "output"]
        assert said == ["got:the ", "got:also"]
