"""Issue 37 item 1: an agent failure is decided once.

The failure's task is read once and its owner asked once, under the session's guard, into a
`FailureCase`; the bookkeeping, the host's dispatch and every `laneway_agent_failed` observer
(Office's own path among them) receive that case. The dispatch reads the session and the task
as they stand then (the spec's guards 4 and 5) and hands them on, so no observer reads them
again. Counted here through the host's own services, on a real database.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from core.agents import worker
from core.model import AgentFailure, FailureCase
from core.runs import RunRequest
from plugins import hookimpl
from tests.agent_error.helpers import World, patched, probe


@attrs.define
class Counted:
    """Wraps one service method of one host, counting its calls."""

    original: Any
    calls: int = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.original(*args, **kwargs)


@attrs.define
class CaseRecorder:
    """A plugin observing agent failures with the decided case."""

    seen: list[tuple[AgentFailure, FailureCase]] = attrs.field(factory=list)

    @hookimpl
    def laneway_agent_failed(self, failure: AgentFailure, case: FailureCase) -> None:
        self.seen.append((failure, case))


@pytest.fixture
def recorder(world: World) -> Iterator[CaseRecorder]:
    found = CaseRecorder()
    manager = world.host.bundle.registry.hooks.manager
    manager.register(found, name="case-recorder")
    try:
        yield found
    finally:
        manager.unregister(found)


@pytest.fixture
def reads(world: World) -> Iterator[dict[str, Counted]]:
    """Every read of a task and every ownership question, for the whole handling: decision,
    bookkeeping, dispatch and the plugins' observers."""
    counted = {
        "tasks.get": Counted(world.host.tasks.get),
        "tasks.owner": Counted(world.host.tasks.owner),
    }
    with (
        patched(world.host.tasks, "get", counted["tasks.get"]),
        patched(world.host.tasks, "owner", counted["tasks.owner"]),
    ):
        yield counted


def test_issue_37_failure_decided_once_a_kanban_failure_asks_its_owner_once(
    world: World, recorder: CaseRecorder, reads: dict[str, Counted]
) -> None:
    """A kanban task's failure: the owner is asked once (before, the bookkeeping and the
    dispatch each asked), and the observers receive the case the dispatch left, the session
    and task it read and `dispatched` set."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    session = world.session(task, world.scripted("a", "worker"))
    for counted in reads.values():
        counted.calls = 0

    failure = world.fail(task, session)

    assert world.probe.labels() == ["recover"]
    assert reads["tasks.owner"].calls == 1
    ((observed, case),) = recorder.seen
    assert observed == failure
    assert case.failure == failure
    assert case.owner is None
    assert case.dispatched is True
    assert case.task is not None
    assert case.task.id == task.id
    assert case.task.state == "REVIEW"  # as the dispatch read it, after the bookkeeping
    assert case.session is not None
    assert case.session.id == session.id


def test_issue_37_failure_decided_once_office_reads_the_decided_case(
    world: World, recorder: CaseRecorder, reads: dict[str, Counted]
) -> None:
    """An Office task whose claimed run's agent fails: the owner is asked once for the whole
    handling and the task read twice (decision, dispatch); Office's own path reads neither
    again (before, it read the task a third time and decided its ownership for itself), yet
    dispatches under its run's key from the case it received."""
    wf = world.board([probe("office-recover")])
    task = world.task(wf, project="proj-1")
    agent = world.scripted("a", "worker")
    queued = world.host.runs.enqueue(
        RunRequest(agent.id, task.id, world.step_id(wf, "Work"), "task_assigned")
    )
    run = worker.claim_next(world.host)
    assert run is not None
    assert run.id == queued.run_id
    session = world.session(task, agent)
    for counted in reads.values():
        counted.calls = 0

    world.fail(task, session, run_id=run.id)

    assert reads["tasks.owner"].calls == 1
    # the decision's read under the guard, the dispatch's read of the task as it stands then
    assert reads["tasks.get"].calls == 2
    ((_failure, case),) = recorder.seen
    assert case.owner == "office"
    assert case.dispatched is False  # the host's dispatch leaves Office's task alone
    (seen,) = world.probe.on_agent_error()
    assert seen["operation_id"] == f"agent_error:{run.id}"
