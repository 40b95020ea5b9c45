"""AC-B1, AC-B3, AC-B4, AC-B5: Office isolation.

Mapping: `models.Task.IsFromOffice` is laneway's task-ownership hook (`laneway_task_ownership`,
answered by office_plugin: the task has a project, or stands in the workspace's office
workflow); Office's Path A (`dispatchAgentErrorTrigger`, gated on a claimed Office run) is
office_plugin's `laneway_agent_failed`, keyed `agent_error:<run id>`. A claimed run is one the
runs worker claimed and is executing when its agent fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.agents import worker
from core.model import Task, Workflow
from core.runs import RunRequest
from tests.agent_error.helpers import World, dispatch_records, probe, with_fields

# every test here runs a real agent process (the tier audit, tests/conftest.py)
pytestmark = pytest.mark.subprocess

OWNERSHIP = ["project", "office-workflow"]


def _office_task(world: World, ownership: str) -> tuple[Workflow, Task]:
    wf = world.board([probe("office-recover")])
    if ownership == "project":
        task = world.task(wf, project="proj-1")
    else:
        world.host.workspace.set(office_workflow=wf.id)
        task = world.task(wf)
    assert world.host.tasks.owner(task) == "office"
    return wf, task


def _office_records(logs: list[dict[str, Any]], task: Task) -> list[dict[str, Any]]:
    """Office's own dispatch records (Path A): office_plugin's, with the run id and count."""
    return [
        r
        for r in with_fields(logs, "INFO", task_id=task.id)
        if r["name"] == "office_plugin" and {"run_id", "action_count"} <= r["extra"].keys()
    ]


@pytest.mark.parametrize("ownership", OWNERSHIP)
def test_ac_b1_ac_b5_office_task_without_a_claimed_run_dispatches_nothing(
    world: World, laneway_logs: list[dict[str, Any]], ownership: str
) -> None:
    """AC-B1: an Office-owned task's failure is never dispatched by the host's mechanism
    (silently), and AC-B5's first case: with no claimed Office run, Office's path does not
    fire either - zero dispatches for a real R1 failure."""
    _wf, task = _office_task(world, ownership)
    session = world.session(task, world.crashing(status=3))

    outcome = world.turn(session)

    assert outcome.route == "R1"
    assert world.probe.on_agent_error() == []
    assert world.step_name(task.id) == "Work"
    assert dispatch_records(laneway_logs) == []
    assert _office_records(laneway_logs, task) == []


@pytest.mark.parametrize("ownership", OWNERSHIP)
def test_ac_b3_ac_b4_office_task_with_a_claimed_run_dispatches_once_via_office(
    world: World, laneway_logs: list[dict[str, Any]], ownership: str
) -> None:
    """AC-B4: one failure, at most one on_agent_error across both mechanisms; for an Office
    task whose claimed run's agent fails (a real process, run by the worker) it is Office's,
    and AC-B3: Office's path keeps its own key `agent_error:<run id>` and its own record while
    the host's dispatch stays silent (AC-B1)."""
    wf, task = _office_task(world, ownership)
    agent = world.crashing(status=3)
    queued = world.host.runs.enqueue(
        RunRequest(agent.id, task.id, world.step_id(wf, "Work"), "task_assigned")
    )

    summary = worker.work(world.host, once=True)

    assert (summary.claimed, summary.failed) == (1, 1)
    seen = world.probe.on_agent_error()
    assert len(seen) <= 1
    (only,) = seen
    assert only["operation_id"] == f"agent_error:{queued.run_id}"
    assert only["payload"]["failed_agent_id"] == agent.id
    assert dispatch_records(laneway_logs) == []
    (office,) = _office_records(laneway_logs, task)
    assert office["extra"]["run_id"] == queued.run_id


def test_ac_b4_kanban_task_with_a_claimed_run_dispatches_once_via_the_host(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B4: a kanban task worked through the runs queue (a claimed run) fails: Office's path
    does not fire for a task it does not own, so the host's dispatch is the only one."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    agent = world.crashing(status=3)
    world.host.runs.enqueue(RunRequest(agent.id, task.id, world.step_id(wf, "Work"), "x"))

    worker.work(world.host, once=True)

    seen = world.probe.on_agent_error()
    assert len(seen) <= 1
    assert [s["operation_id"].startswith("agent_error:session:") for s in seen] == [True]
    assert _office_records(laneway_logs, task) == []


def test_ac_b5_every_enumerated_zero_case_dispatches_nothing(world: World) -> None:
    """AC-B5: the failure's dispatch count is zero - across both mechanisms - for an Office
    task without a claimed run, and for AC-A5, AC-A8, AC-B2 and AC-F1..AC-F6 skips. (The
    cancel-outruns-the-timer zero is in test_routes' AC-A10 test.)"""
    host = world.host
    kanban = world.board([probe("recover")])
    agent = world.scripted("a", "worker")

    def kanban_pair() -> tuple[Task, Any]:
        task = world.task(kanban)
        return task, world.session(task, agent)

    _wf, office = _office_task(world, "project")
    world.fail(office, world.session(office, agent))  # Office, no claimed run
    task, _session = kanban_pair()
    world.fail(task, None)  # AC-A5
    task, session = kanban_pair()
    world.fail(task, session, route="R6", user_initiated=True)  # AC-A8
    task, session = kanban_pair()
    dispatch = host.runtime.handle_failure(world.failure(task, session))
    host.tasks.delete(task.id)  # AC-B2's missing task (and AC-A7's missing session)
    dispatch()
    task, session = kanban_pair()
    world.make_ephemeral(task)
    world.fail(task, session)  # AC-F2
    task, session = kanban_pair()
    host.tasks.detach(task.id)
    world.fail(task, session)  # AC-F3
    task, session = kanban_pair()
    host.tasks.archive(task.id)
    world.fail(task, session)  # AC-F4
    task, session = kanban_pair()
    host.sessions.set_state(world.session(task, agent).id, "RUNNING")
    world.fail(task, session)  # AC-F5

    assert world.probe.on_agent_error() == []


@pytest.mark.parametrize("ownership", OWNERSHIP)
def test_office_off_means_off_its_on_agent_error_path_does_not_run(
    world: World, laneway_logs: list[dict[str, Any]], ownership: str
) -> None:
    """Office off means off: with the office feature disabled (`plugins list` shows office
    `enabled: false`), an Office task whose claimed run's agent fails is neither dispatched
    nor moved - not by Office's own on_agent_error path, not by the host's."""
    wf = world.board([probe("office-recover"), {"type": "move_to_next"}])
    if ownership == "project":
        task = world.task(wf, project="proj-1")
    else:
        world.host.workspace.set(office_workflow=wf.id)
        task = world.task(wf)
    agent = world.crashing(status=3)
    world.host.runs.enqueue(
        RunRequest(agent.id, task.id, world.step_id(wf, "Work"), "task_assigned")
    )
    world.host.set_features(office=False)
    (office,) = [p for p in world.host.plugins.list() if p["name"] == "office"]
    assert office["enabled"] is False

    summary = worker.work(world.host, once=True)

    assert (summary.claimed, summary.failed) == (1, 1)
    assert world.probe.on_agent_error() == []
    assert world.step_name(task.id) == "Work"
    assert _office_records(laneway_logs, task) == []
    assert dispatch_records(laneway_logs) == []
