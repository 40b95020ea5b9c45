"""Issue 24 test "the Office Default template's declarations now act": at Work, on_comment,
on_children_completed and on_blocker_resolved each queue the runner's run (reasons
task_comment, children_completed, blockers_resolved), and what fired them reaches the run's
prompt: the comment, each child's state and last summary line, the resolved blockers."""

from __future__ import annotations

from typing import Any

from core.agents.session import prompt_for
from tests.conftest import open_host


def _office(host: Any) -> Any:
    wf = host.workflows.create_from_template("office-default")
    host.profiles.add("runner", command=["agent"])
    host.participants.add(step="Work", role="runner", profile="runner", workflow=wf.id)
    return wf


def _run(host: Any, task_id: str, reason: str) -> Any:
    (run,) = [r for r in host.runs.list(task=task_id) if r.reason == reason]
    return run


def test_office_default_work_step_declarations_act(db_url: str) -> None:
    with open_host(db_url) as host:
        wf = _office(host)
        work = wf.step("Work")
        assert work is not None

        commented = host.tasks.move(host.tasks.create(workflow=wf.id, title="c").id, "Work")
        host.comments.add(commented.id, "Please use tabs", author="alice")
        run = _run(host, commented.id, "task_comment")
        assert run.workflow_step_id == work.id
        assert "- alice: Please use tabs" in prompt_for(host, run)

        parent = host.tasks.move(host.tasks.create(workflow=wf.id, title="epic").id, "Work")
        child = host.tasks.create(workflow=wf.id, title="sub", parent=parent.id)
        session = host.sessions.start(child.id, profile="runner")
        host.sessions.append_items(
            session.id, [("message", "Looked around.\nParser fixed, tests green.", {})]
        )
        host.tasks.move(child.id, "Done")
        run = _run(host, parent.id, "children_completed")
        (summary,) = run.payload["children"]
        assert summary == {
            "task_id": child.id,
            "title": "sub",
            "state": "COMPLETED",
            "summary": "Parser fixed, tests green.",
        }
        assert f"- sub ({child.id}) COMPLETED: Parser fixed, tests green." in prompt_for(host, run)

        blocked = host.tasks.move(host.tasks.create(workflow=wf.id, title="w").id, "Work")
        blocker = host.tasks.create(workflow=wf.id, title="b")
        host.blockers.block(blocked.id, blocker.id)
        host.tasks.move(blocker.id, "Done")
        run = _run(host, blocked.id, "blockers_resolved")
        assert run.payload["resolved_blocker_ids"] == [blocker.id]
        assert f"The tasks blocking this one are done: {blocker.id}" in prompt_for(host, run)
