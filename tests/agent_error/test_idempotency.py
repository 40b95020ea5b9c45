"""AC-A6 and AC-C1..AC-C8: the operation id, what counts as a dispatch, and what a repeat,
a second execution, an action error or a restart do.

Mapping: `Engine.HandleTrigger` + `TransitionStore.IsOperationApplied` are laneway's
`Engine.handle_trigger(operation_id=...)` and its durable `applied_operations` table
(`core.operations`, `TriggerResult.idempotent`). Issue 9 makes the ids durable, so AC-C5's
"one backend process lifetime" becomes "the board's retention window", across processes and
restarts (tests/agent_error/test_durable_operations.py runs the processes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import ids, ledger
from core.errors import NotFound
from core.store import tables as t
from plugins.testing.logs import matching
from tests.agent_error.helpers import Probe as ProbePlugin
from tests.agent_error.helpers import (
    World,
    act,
    dispatch_records,
    open_world_host,
    probe,
    walk_warnings,
)

UNSET_CREDENTIAL = "LANEWAY_AE_TEST_CREDENTIAL_NEVER_SET"


def _pair(world: World, on_agent_error: list[dict[str, Any]]) -> tuple[Any, Any, Any]:
    wf = world.board(on_agent_error)
    task = world.task(wf)
    return wf, task, world.session(task, world.scripted("a", "worker"))


# -- AC-A6 -----------------------------------------------------------------------------------------


def test_ac_a6_dispatched_with_actions_emits_exactly_one_info_with_its_fields(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-A6: a dispatched trigger whose step ran actions emits exactly one INFO naming the
    task, the session, the step and the operation id."""
    wf, task, session = _pair(world, [probe("recover")])

    world.fail(task, session, agent_execution_id="exec-1")

    (record,) = dispatch_records(laneway_logs)
    assert record["level"] == "INFO"
    assert record["extra"]["task_id"] == task.id
    assert record["extra"]["session_id"] == session.id
    assert record["extra"]["step_id"] == world.step_id(wf, "Work")
    assert record["extra"]["operation_id"] == f"agent_error:session:{session.id}:exec-1"


@pytest.mark.parametrize("case", ["actions", "none", "idempotent", "engine-error"])
def test_ac_a6_the_four_outcomes_emit_at_most_one_record(
    world: World, laneway_logs: list[dict[str, Any]], case: str
) -> None:
    """AC-A6: the four outcomes of an invocation that reaches the engine are disjoint and
    each emits at most one record: actions ran -> INFO; none declared -> DEBUG (AC-E2);
    short-circuited as idempotent -> nothing (AC-C3); engine error -> ERROR (AC-E5)."""
    if case == "engine-error":  # move_to_next from the last step: the engine raises
        wf = world.flow(
            {
                "name": "Last",
                "position": 0,
                "is_start_step": True,
                "events": {"on_agent_error": [act("move_to_next")]},
            }
        )
        task = world.task(wf)
        session = world.session(task, world.scripted("a", "worker"))
    else:
        _wf, task, session = _pair(world, [] if case == "none" else [probe("recover")])
    failure = world.failure(task, session, agent_execution_id="exec-1")
    if case == "idempotent":
        world.host.runtime.fail_and_dispatch(failure)
        laneway_logs.clear()

    world.host.runtime.fail_and_dispatch(failure)

    expected = {"actions": ["INFO"], "none": ["DEBUG"], "idempotent": [], "engine-error": ["ERROR"]}
    assert [r["level"] for r in dispatch_records(laneway_logs)] == expected[case]


# -- AC-C1, AC-C2 ----------------------------------------------------------------------------------


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_ac_c1_operation_id_is_session_and_execution(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C1: the operation id is `agent_error:session:<session id>:<execution id>`: the
    actions see it and the record names it; a real R1 failure carries its execution's id."""
    _wf, task, session = _pair(world, [probe("recover")])
    world.fail(task, session, agent_execution_id="exec-42")
    assert world.probe.on_agent_error()[0]["operation_id"] == (
        f"agent_error:session:{session.id}:exec-42"
    )

    crashing = world.session(task, world.crashing(status=3))
    world.turn(crashing)
    real = world.probe.on_agent_error()[1]["operation_id"]
    assert re.fullmatch(rf"agent_error:session:{crashing.id}:[^:]+", real)
    assert dispatch_records(laneway_logs)[-1]["extra"]["operation_id"] == real


def test_ac_c2_empty_execution_id_gives_the_session_key(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C2: a failure without an execution id - route R3, missing credentials, where no
    process was started - is keyed `agent_error:session:<session id>`."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    session = world.session(task, world.scripted("r3", "worker", requires_env=[UNSET_CREDENTIAL]))

    outcome = world.turn(session)

    assert outcome.route == "R3"
    (seen,) = world.probe.on_agent_error()
    assert seen["operation_id"] == f"agent_error:session:{session.id}"
    (record,) = dispatch_records(laneway_logs)
    assert record["extra"]["operation_id"] == f"agent_error:session:{session.id}"


# -- AC-C3, AC-C4 ----------------------------------------------------------------------------------


def test_ac_c3_the_same_failure_twice_is_absorbed(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C3: the same failure handled twice in one process lifetime, the first having
    completed its actions: the second runs no action, emits no dispatch record, and the engine
    reports the operation idempotent. The AC-E4 walk WARNING (an action nobody provides) is
    not suppressed on the repeat: the walk precedes the engine call."""
    _wf, task, session = _pair(world, [probe("recover"), act("ae_nobody_provides_this")])
    failure = world.failure(task, session, agent_execution_id="exec-1")

    world.host.runtime.fail_and_dispatch(failure)
    first_walk = walk_warnings(laneway_logs, session.id)
    laneway_logs.clear()
    world.host.runtime.fail_and_dispatch(failure)

    assert len(world.probe.on_agent_error()) == 1
    assert dispatch_records(laneway_logs) == []
    assert len(first_walk) == 1
    assert len(walk_warnings(laneway_logs, session.id)) == 1
    result = world.host.bundle.engine.handle_trigger(
        task.id, "on_agent_error", session_id=session.id, operation_id=failure.operation_id
    )
    assert result.idempotent is True


def test_ac_c3_a_bundle_republish_does_not_forget_applied_operations(world: World) -> None:
    """AC-C3 / AC-C5: the repeat is absorbed "within one backend process lifetime". A bundle
    republished between the two deliveries (`host.set_features`, here changing nothing) is
    not a new process: the second delivery of the same failure must still run no action."""
    _wf, task, session = _pair(world, [probe("recover")])
    failure = world.failure(task, session, agent_execution_id="exec-1")

    world.host.runtime.fail_and_dispatch(failure)
    world.host.set_features(office=True)
    world.host.runtime.fail_and_dispatch(failure)

    assert world.probe.labels() == ["recover"]


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_ac_c4_two_executions_of_one_session_both_dispatch(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C4: two distinct executions on one session fail in sequence (two real turns of a
    crashing agent on the same session): both dispatch, under distinct operation ids."""
    _wf, task, _session = _pair(world, [probe("recover")])
    session = world.session(task, world.crashing(status=3))

    world.turn(session)
    world.turn(session)

    ops = [s["operation_id"] for s in world.probe.on_agent_error()]
    assert len(ops) == 2
    assert len(set(ops)) == 2
    assert all(op.startswith(f"agent_error:session:{session.id}:") for op in ops)
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO", "INFO"]


# -- AC-C5 (durable since issue 9) ------------------------------------------------------------


def test_ac_c5_the_same_failure_after_a_restart_dispatches_once(
    db_url: str, tmp_path: Path, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C5, made durable (issue 9 item 5): operation ids live in the database, so the same
    failure delivered again after a restart (a new Host on the same database, a new epoch) is
    idempotent: no action runs and no dispatch record is emitted."""
    files = tmp_path / "files"
    files.mkdir()
    first = ProbePlugin()
    with open_world_host(db_url, first) as host:
        world = World(host, first, files, db_url)
        _wf, task, session = _pair(world, [probe("recover")])
        failure = world.failure(task, session, agent_execution_id="exec-1")
        host.runtime.fail_and_dispatch(failure)
        host.runtime.fail_and_dispatch(failure)
        assert len(first.on_agent_error()) == 1
    second = ProbePlugin()
    with open_world_host(db_url, second) as host:
        host.runtime.fail_and_dispatch(failure)
        assert host.operations.is_applied(failure.operation_id)
    assert second.on_agent_error() == []
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]


def test_ac_c5_a_delivery_cut_short_by_a_crash_is_evaluated_again_after_restart(
    db_url: str, tmp_path: Path
) -> None:
    """AC-C5 / AC-C6: an operation claimed by a process that died before its actions finished
    (its row `running`, its epoch dead) is not a completed handling: the next delivery, in a
    new process, re-claims it and runs the list."""
    files = tmp_path / "files"
    files.mkdir()
    first = ProbePlugin()
    with open_world_host(db_url, first) as host:
        world = World(host, first, files, db_url)
        _wf, task, session = _pair(world, [probe("recover")])
        failure = world.failure(task, session, agent_execution_id="exec-1")
        # The state a crash between the claim and the end of the actions leaves behind.
        assert host.operations.claim(failure.operation_id)
    second = ProbePlugin()
    with open_world_host(db_url, second) as host:
        host.runtime.fail_and_dispatch(failure)
        assert host.operations.is_applied(failure.operation_id)
    assert second.labels() == ["recover"]


def test_ac_c5_an_operation_a_live_peer_is_evaluating_is_not_evaluated_twice(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C5: while a live epoch (here this process's own, as a peer thread would) holds the
    operation `running`, another delivery of the same failure runs nothing and emits no
    dispatch record."""
    _wf, task, session = _pair(world, [probe("recover")])
    failure = world.failure(task, session, agent_execution_id="exec-1")
    assert world.host.operations.claim(failure.operation_id)

    world.host.runtime.fail_and_dispatch(failure)

    assert world.probe.on_agent_error() == []
    assert dispatch_records(laneway_logs) == []


def test_ac_c5_operation_ids_past_the_retention_window_are_pruned(world: World) -> None:
    """AC-C5: the table does not grow without bound: ids claimed longer ago than the
    retention window (seven days by default) are deleted; younger ones stay."""
    assert world.host.operations.retention_s == 7 * 24 * 3600
    _wf, task, session = _pair(world, [probe("recover")])
    old = world.failure(task, session, agent_execution_id="old")
    young = world.failure(task, session, agent_execution_id="young")
    world.host.runtime.fail_and_dispatch(old)
    world.host.runtime.fail_and_dispatch(young)
    eight_days_ago = ids.shift(ids.now(), -8 * 24 * 3600)
    world.write(
        sa.update(t.applied_operations)
        .where(t.applied_operations.c.operation_id == old.operation_id)
        .values(created_at=eight_days_ago)
    )

    assert world.host.operations.prune() == 1

    assert not world.host.operations.is_applied(old.operation_id)
    assert world.host.operations.is_applied(young.operation_id)


def test_ac_c5_an_execution_id_longer_than_the_key_is_still_one_operation(world: World) -> None:
    """AC-C1 / AC-C5: an outside agent may report any execution id; one longer than the
    stored key is kept by its digest, so it is still absorbed on redelivery, and a different
    long id is still a different operation (AC-C4)."""
    _wf, task, session = _pair(world, [probe("recover")])
    long_a = world.failure(task, session, agent_execution_id="a" * 2000)
    long_b = world.failure(task, session, agent_execution_id="a" * 1999 + "b")

    world.host.runtime.fail_and_dispatch(long_a)
    world.host.runtime.fail_and_dispatch(long_a)
    world.host.runtime.fail_and_dispatch(long_b)

    assert world.probe.labels() == ["recover", "recover"]


# -- AC-C6, AC-C7, AC-C8 ---------------------------------------------------------------------------


def test_ac_c6_an_action_error_leaves_the_operation_unmarked(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C6: an action in the list fails: the evaluation aborts (the actions after it do not
    run), the operation stays unmarked, and a redelivery of the same failure re-runs the list
    from the start, including the action that already succeeded."""
    _wf, task, session = _pair(world, [probe("first"), act("ae_fail"), probe("never")])
    failure = world.failure(task, session, agent_execution_id="exec-1")

    world.host.runtime.fail_and_dispatch(failure)
    assert world.probe.labels() == ["first"]
    world.host.runtime.fail_and_dispatch(failure)

    assert world.probe.labels() == ["first", "first"]
    assert world.step_name(task.id) == "Work"


def test_ac_c7_a_refused_transition_is_not_applied_on_the_second_delivery(
    world: World, laneway_logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-C7 (issue 10 item 2): the engine resolved a move and the transition refused it
    (here: the destination's entry record cannot be written, so the step change is rolled
    back). The operation was recorded before the move, so the second delivery of the same
    failure (same session, same execution id) is idempotent: the move is not applied then,
    even though it would succeed. The refusal is logged once, by the transition; the dispatch
    adds no ERROR of its own (its one record is AC-A6's INFO) and does not raise."""
    real_allocate = ledger.allocate
    refusals = []

    def refuse_once(*args: Any, **kwargs: Any) -> Any:
        if not refusals:
            refusals.append(1)
            raise sa.exc.OperationalError(
                "INSERT INTO step_entries ...", {}, Exception("disk full")
            )
        return real_allocate(*args, **kwargs)

    monkeypatch.setattr(ledger, "allocate", refuse_once)
    _wf, task, session = _pair(world, [act("move_to_next")])

    world.fail(task, session, agent_execution_id="exec-1")
    assert world.step_name(task.id) == "Work"
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]
    refused = matching(laneway_logs, "ERROR", task_id=task.id, entry_path="E1")
    assert len(refused) == 1
    assert "disk full" in refused[0]["extra"]["cause"]

    laneway_logs.clear()
    world.fail(task, session, agent_execution_id="exec-1")

    assert world.step_name(task.id) == "Work"
    assert dispatch_records(laneway_logs) == []
    assert world.host.operations.is_applied(f"agent_error:session:{session.id}:exec-1")


def test_ac_c7_a_missing_target_step_is_declined_with_one_warning(
    world: World, laneway_logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-C7: a move whose target step the transition cannot find is declined: one WARNING
    naming the target, the operation applied, nothing raised, and no retry on redelivery."""
    wf, task, session = _pair(world, [act("move_to_next")])
    recover_id = world.step_id(wf, "Recover")
    real_step_by_id = world.host.repository.step  # the transition's read (the kernel's)

    def vanished(step_id: str) -> Any:
        if step_id == recover_id:
            raise NotFound(f"no step {step_id!r}")
        return real_step_by_id(step_id)

    monkeypatch.setattr(world.host.repository, "step", vanished)
    world.fail(task, session, agent_execution_id="exec-1")
    monkeypatch.undo()
    world.fail(task, session, agent_execution_id="exec-1")

    assert world.step_name(task.id) == "Work"
    declined = matching(laneway_logs, to_step_id=recover_id)
    assert len(declined) == 1
    assert declined[0]["level"] == "WARNING"
    assert declined[0]["extra"]["task_id"] == task.id


def test_ac_c8_two_empty_execution_ids_collapse_to_one_dispatch(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-C8: two failures of one session without execution ids share the AC-C2 key: only
    the first dispatches; the second is idempotent and emits no dispatch record."""
    _wf, task, session = _pair(world, [probe("recover")])

    world.fail(task, session, error_message="first failure")
    world.fail(task, session, error_message="second failure")

    (seen,) = world.probe.on_agent_error()
    assert seen["payload"]["error_message"] == "first failure"
    assert [r["level"] for r in dispatch_records(laneway_logs)] == ["INFO"]


def test_ac_c8_an_unmarked_first_failure_does_not_suppress_the_second(world: World) -> None:
    """AC-C8: the collapse holds only when the first handling completed its actions: if an
    action errored (operation unmarked, AC-C6), the second empty-id failure re-runs the list."""
    _wf, task, session = _pair(world, [probe("first"), act("ae_fail")])

    world.fail(task, session)
    world.fail(task, session)

    assert world.probe.labels() == ["first", "first"]
