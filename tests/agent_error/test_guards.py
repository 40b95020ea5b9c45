"""AC-A5, AC-A7, AC-B2, AC-F1..AC-F9: the dispatch's guard sequence, first match wins, each
guard silent or recording exactly one line, evaluated before the operation is marked.

Failures here are synthetic `AgentFailure`s delivered through the runtime's own handling
(`fail_and_dispatch`, or `handle_failure` and then the closure it returns, when a test must
change the world between the bookkeeping and the dispatch - "deleted between the failure and
this point"). The routes themselves are driven by real processes in test_routes.py.

Mapping: Go's "nil row with nil error" has no Python counterpart (a read returns a row or
raises), so "not found" is laneway's `NotFound` and "any other error" a raising read;
`otherWorkingSessionID` is the dispatch's scan of the task's sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from core.agents import failure as agent_error
from core.errors import NotFound
from core.model import Session, Task
from tests.agent_error.helpers import (
    EVENT,
    World,
    dispatch_records,
    errors_and_warnings,
    patched,
    probe,
)


def _db_error(*_args: Any, **_kwargs: Any) -> Any:
    raise sa.exc.OperationalError("SELECT ...", {}, Exception("connection reset by peer"))


def _not_found(*_args: Any, **_kwargs: Any) -> Any:
    raise NotFound("no such row")


@attrs.define
class Counter:
    """Wraps one service method of one host, counting calls (optionally replacing it)."""

    original: Callable[..., Any]
    replacement: Callable[..., Any] | None = None
    calls: int = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return (self.replacement or self.original)(*args, **kwargs)


def _kanban(world: World) -> tuple[Task, Session]:
    wf = world.board([probe("recover")])
    task = world.task(wf)
    return task, world.session(task, world.scripted("a", "worker"))


def _only(logs: list[dict[str, Any]], level: str) -> dict[str, Any]:
    records = dispatch_records(logs)
    assert [r["level"] for r in records] == [level], records
    return records[0]


# -- AC-F1, AC-A5: before any read, silent ------------------------------------------------------


def test_ac_f1_no_engine_in_the_bundle_skips_silently(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F1: the retained bundle (AC-E13) carries no engine: skip, record nothing."""
    task, session = _kanban(world)
    holder = world.host._holder
    assert holder is not None
    holder.publish(attrs.evolve(holder.current(), engine=None))

    world.fail(task, session)

    assert world.probe.on_agent_error() == []
    assert dispatch_records(laneway_logs) == []
    assert errors_and_warnings(laneway_logs) == []


def test_ac_f1_no_bundle_at_all_skips_silently(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F1: no retained bundle at all: the dispatch skips and records nothing."""
    task, session = _kanban(world)
    failure = world.failure(task, session)

    with patched(world.host, "_holder", None):
        dispatched = agent_error.dispatch(world.host, failure)

    assert dispatched is False
    assert world.probe.on_agent_error() == []
    assert dispatch_records(laneway_logs) == []
    assert errors_and_warnings(laneway_logs) == []


def test_ac_a5_a_sessionless_failure_neither_dispatches_nor_warns(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A5: a failure carrying no session id is an ordinary outcome: no dispatch, no
    record, no warning of any kind."""
    task, _session = _kanban(world)

    world.fail(task, None)

    assert world.probe.on_agent_error() == []
    assert dispatch_records(laneway_logs) == []
    assert errors_and_warnings(laneway_logs) == []


# -- AC-A7, AC-F6 (session read), AC-B2 (task read) ---------------------------------------------


def test_ac_a7_a_session_deleted_before_the_dispatch_is_a_debug_no_op(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A7: the failed session's row is deleted between the failure and the dispatch: a
    no-op with one DEBUG record (task and session ids), never an error or a warning."""
    task, session = _kanban(world)
    dispatch = world.host.runtime.handle_failure(world.failure(task, session))
    world.delete_session_row(session.id)

    dispatch()

    assert world.probe.on_agent_error() == []
    record = _only(laneway_logs, "DEBUG")
    assert record["extra"]["task_id"] == task.id
    assert record["extra"]["session_id"] == session.id
    assert errors_and_warnings(laneway_logs) == []


def test_ac_f6_an_unreadable_session_skips_with_one_warning(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F6 (session reload): the session read fails for a reason other than not-found: skip
    (fail closed) with exactly one WARNING of the dispatch's own."""
    task, session = _kanban(world)
    dispatch = world.host.runtime.handle_failure(world.failure(task, session))

    with patched(world.host.sessions, "get", _db_error):
        dispatch()

    assert world.probe.on_agent_error() == []
    record = _only(laneway_logs, "WARNING")
    assert (record["extra"]["task_id"], record["extra"]["session_id"]) == (task.id, session.id)


@pytest.mark.parametrize("read", ["missing", "errors"])
def test_ac_b2_an_unreadable_task_skips_with_one_warning(
    world: World, laneway_logs: list[dict[str, Any]], read: str
) -> None:
    """AC-B2: the task cannot be loaded - it does not exist, or its read errors - so its
    ownership is unknown: fail closed (no dispatch) with exactly one WARNING, and AC-F6 adds
    none of its own."""
    task, session = _kanban(world)
    if read == "missing":
        failure = attrs.evolve(world.failure(task, session), task_id="no-such-task")
        world.host.runtime.fail_and_dispatch(failure)
        task_id = "no-such-task"
    else:
        dispatch = world.host.runtime.handle_failure(world.failure(task, session))
        with patched(world.host.tasks, "get", _db_error):
            dispatch()
        task_id = task.id

    assert world.probe.on_agent_error() == []
    record = _only(laneway_logs, "WARNING")
    assert (record["extra"]["task_id"], record["extra"]["session_id"]) == (task_id, session.id)


# -- AC-F2, AC-F3, AC-F4: the task's shape, silent ------------------------------------------------


@pytest.mark.parametrize("shape", ["ephemeral", "no-step", "archived"])
def test_ac_f2_f3_f4_tasks_without_a_usable_step_skip_silently(
    world: World, laneway_logs: list[dict[str, Any]], shape: str
) -> None:
    """AC-F2 (ephemeral task), AC-F3 (task at no step: detached from its workflow), AC-F4
    (archived task): skip without any record."""
    task, session = _kanban(world)
    if shape == "ephemeral":
        world.make_ephemeral(task)
    elif shape == "no-step":
        world.host.tasks.detach(task.id)
    else:
        world.host.tasks.archive(task.id)

    world.fail(task, session)

    assert world.probe.on_agent_error() == []
    assert dispatch_records(laneway_logs) == []
    assert errors_and_warnings(laneway_logs) == []


# -- AC-F5, AC-F6 (sibling scan) -------------------------------------------------------------------


@pytest.mark.parametrize("sibling_state", ["RUNNING", "STARTING"])
def test_ac_f5_another_working_session_blocks_with_a_debug_naming_it(
    world: World, laneway_logs: list[dict[str, Any]], sibling_state: str
) -> None:
    """AC-F5: another session of the task is working: skip, one DEBUG naming the blocking
    session."""
    task, session = _kanban(world)
    sibling = world.session(task, world.scripted("b", "worker"))
    world.host.sessions.set_state(sibling.id, sibling_state)

    world.fail(task, session)

    assert world.probe.on_agent_error() == []
    record = _only(laneway_logs, "DEBUG")
    assert record["extra"]["blocking_session_id"] == sibling.id
    assert (record["extra"]["task_id"], record["extra"]["session_id"]) == (task.id, session.id)


def test_ac_f5_an_idle_sibling_does_not_block(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F5: only a *working* sibling blocks; one waiting for input does not."""
    task, session = _kanban(world)
    world.session(task, world.scripted("b", "worker"))  # WAITING_FOR_INPUT

    world.fail(task, session)

    assert len(world.probe.on_agent_error()) == 1
    _only(laneway_logs, "INFO")


def test_ac_f6_a_failed_sibling_scan_skips_without_a_record_of_its_own(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F6 (the sibling scan): the read of the task's sessions fails: fail closed - no
    dispatch - and no record of the dispatch's own."""
    task, session = _kanban(world)
    dispatch = world.host.runtime.handle_failure(world.failure(task, session))

    with patched(world.host.sessions, "list", _db_error):
        dispatch()

    assert world.probe.on_agent_error() == []
    assert dispatch_records(laneway_logs) == []


def test_ac_f6_a_failed_sibling_scan_is_a_skip_not_a_crash(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F6: a failed sibling scan is a *skip* ("Each is a skip with no dispatch"): the
    dispatch returns without dispatching instead of raising, so nothing is reported as a
    panic (AC-A11's ERROR is for a panicking callback) and the rest of the failure handling -
    the plugins' agent-failure observers - still runs."""
    task, session = _kanban(world)
    failure = world.failure(task, session)
    dispatch = world.host.runtime.handle_failure(failure)

    with patched(world.host.sessions, "list", _db_error):
        dispatch()
    assert [r for r in laneway_logs if r["level"] == "ERROR"] == []
    assert world.probe.failures == [failure]
    with patched(world.host.sessions, "list", _db_error):
        assert agent_error.dispatch(world.host, failure) is False


# -- AC-F7 -----------------------------------------------------------------------------------------


def test_ac_f7_a_transient_skip_does_not_mark_the_operation(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F7: guards run before the operation is marked applied: a failure skipped while a
    sibling was working dispatches when the same failure (same operation id) is delivered
    again once the sibling is idle."""
    task, session = _kanban(world)
    sibling = world.session(task, world.scripted("b", "worker"))
    world.host.sessions.set_state(sibling.id, "RUNNING")
    failure = world.failure(task, session, agent_execution_id="exec-1")

    world.host.runtime.fail_and_dispatch(failure)
    assert world.probe.on_agent_error() == []
    world.host.sessions.set_state(sibling.id, "WAITING_FOR_INPUT")
    world.host.runtime.fail_and_dispatch(failure)

    (seen,) = world.probe.on_agent_error()
    assert seen["operation_id"] == f"agent_error:session:{session.id}:exec-1"
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["DEBUG", "INFO"]


# -- AC-F8: first match wins, at most one record ---------------------------------------------------


def test_ac_f8_sessionless_beats_user_initiated(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F8: AC-A5 (silent) precedes AC-A8 (DEBUG): a sessionless user-initiated failure
    records nothing."""
    task, _session = _kanban(world)
    world.fail(task, None, route="R6", user_initiated=True)
    assert dispatch_records(laneway_logs) == []


def test_ac_f8_no_engine_beats_user_initiated(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F8: AC-F1 (silent) precedes AC-A8 (DEBUG)."""
    task, session = _kanban(world)
    holder = world.host._holder
    assert holder is not None
    holder.publish(attrs.evolve(holder.current(), engine=None))
    world.fail(task, session, route="R6", user_initiated=True)
    assert dispatch_records(laneway_logs) == []


@pytest.mark.parametrize("later", ["session-gone", "sibling-working"])
def test_ac_f8_user_initiated_records_before_any_read(
    world: World, laneway_logs: list[dict[str, Any]], later: str
) -> None:
    """AC-F8: AC-A8 is decided from the failure alone, before any repository read: with the
    session also gone (AC-A7) or a sibling also working (AC-F5), the one record is AC-A8's
    DEBUG (it names the route), and the session is not even read."""
    task, session = _kanban(world)
    if later == "sibling-working":
        sibling = world.session(task, world.scripted("b", "worker"))
        world.host.sessions.set_state(sibling.id, "RUNNING")
    dispatch = world.host.runtime.handle_failure(
        world.failure(task, session, route="R6", user_initiated=True)
    )
    if later == "session-gone":
        world.delete_session_row(session.id)
    reads = Counter(world.host.sessions.get)

    with patched(world.host.sessions, "get", reads):
        dispatch()

    record = _only(laneway_logs, "DEBUG")
    assert record["extra"]["route"] == "R6"
    assert "blocking_session_id" not in record["extra"]
    assert reads.calls == 0


@pytest.mark.parametrize(("session_read", "level"), [("gone", "DEBUG"), ("errors", "WARNING")])
def test_ac_f8_the_session_is_read_first_and_short_circuits_the_task_read(
    world: World, laneway_logs: list[dict[str, Any]], session_read: str, level: str
) -> None:
    """AC-F8 / Guard evaluation order step 4 before 5: when both reads would fail, the
    session's outcome decides the record - AC-A7's DEBUG (gone) or AC-F6's WARNING (errors) -
    and the task is not read at all, so AC-B2's WARNING never follows."""
    task, session = _kanban(world)
    dispatch = world.host.runtime.handle_failure(world.failure(task, session))
    task_reads = Counter(world.host.tasks.get, replacement=_db_error)
    session_reads = Counter(
        world.host.sessions.get, replacement=_not_found if session_read == "gone" else _db_error
    )

    with (
        patched(world.host.sessions, "get", session_reads),
        patched(world.host.tasks, "get", task_reads),
    ):
        dispatch()

    _only(laneway_logs, level)
    assert session_reads.calls == 1
    assert task_reads.calls == 0


@pytest.mark.parametrize("silent", ["ephemeral", "archived", "no-step"])
def test_ac_f8_silent_shape_guards_precede_the_sibling_debug(
    world: World, laneway_logs: list[dict[str, Any]], silent: str
) -> None:
    """AC-F8: AC-F2/F3/F4 (silent) precede AC-F5 (DEBUG): with a sibling working as well, the
    skip records nothing."""
    task, session = _kanban(world)
    sibling = world.session(task, world.scripted("b", "worker"))
    world.host.sessions.set_state(sibling.id, "RUNNING")
    if silent == "ephemeral":
        world.make_ephemeral(task)
    elif silent == "archived":
        world.host.tasks.archive(task.id)
    else:
        world.host.tasks.detach(task.id)

    world.fail(task, session)

    assert dispatch_records(laneway_logs) == []


def test_ac_f8_a_session_gone_beats_a_working_sibling(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F8: AC-A7 (DEBUG, step 4) precedes AC-F5 (DEBUG, step 8): one record, AC-A7's (it
    names no blocking session)."""
    task, session = _kanban(world)
    sibling = world.session(task, world.scripted("b", "worker"))
    world.host.sessions.set_state(sibling.id, "RUNNING")
    dispatch = world.host.runtime.handle_failure(world.failure(task, session))
    world.delete_session_row(session.id)

    dispatch()

    record = _only(laneway_logs, "DEBUG")
    assert "blocking_session_id" not in record["extra"]


# -- AC-F9 -----------------------------------------------------------------------------------------


def test_ac_f9_every_dispatch_record_carries_its_identity(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F9: every record the dispatch emits - AC-A6's INFO, AC-E2's DEBUG, AC-E5's ERROR
    and each recording guard's line (AC-A8, AC-A7, AC-F5 at DEBUG; AC-B2, AC-F6 at WARNING) -
    carries task_id, session_id and the dispatch's own stable identity (`extra["event"]`,
    emitted by no other module)."""
    host = world.host
    wf = world.board([probe("recover")])
    empty = world.flow({"name": "Only", "position": 0, "is_start_step": True})
    broken = world.flow(
        {
            "name": "Last",
            "position": 0,
            "is_start_step": True,
            "events": {"on_agent_error": [{"type": "move_to_next"}]},
        }
    )
    agent = world.scripted("a", "worker")
    expected: list[tuple[str, str, str]] = []

    def scenario(workflow: Any, level: str, **kw: Any) -> tuple[Task, Session]:
        task = world.task(workflow)
        session = world.session(task, agent)
        expected.append((level, task.id, session.id))
        return task, session

    task, session = scenario(wf, "INFO")  # AC-A6
    world.fail(task, session)
    task, session = scenario(empty, "DEBUG")  # AC-E2
    world.fail(task, session)
    task, session = scenario(broken, "ERROR")  # AC-E5: no next step
    world.fail(task, session)
    task, session = scenario(wf, "DEBUG")  # AC-A8
    world.fail(task, session, route="R6", user_initiated=True)
    task, session = scenario(wf, "DEBUG")  # AC-A7
    dispatch = host.runtime.handle_failure(world.failure(task, session))
    world.delete_session_row(session.id)
    dispatch()
    task, session = scenario(wf, "DEBUG")  # AC-F5
    host.sessions.set_state(world.session(task, agent).id, "RUNNING")
    world.fail(task, session)
    task, session = scenario(wf, "WARNING")  # AC-B2
    dispatch = host.runtime.handle_failure(world.failure(task, session))
    with patched(host.tasks, "get", _db_error):
        dispatch()
    task, session = scenario(wf, "WARNING")  # AC-F6
    dispatch = host.runtime.handle_failure(world.failure(task, session))
    with patched(host.sessions, "get", _db_error):
        dispatch()

    records = dispatch_records(laneway_logs)
    got = [(r["level"], r["extra"]["task_id"], r["extra"]["session_id"]) for r in records]
    assert got == expected
    assert {r["name"] for r in records} == {"core.agents.failure"}
    assert all(r["extra"]["event"] == EVENT for r in records)
