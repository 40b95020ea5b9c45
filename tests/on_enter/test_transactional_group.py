"""Issue 14, target 2: consecutive transactional kinds share one transaction.

An entry's consecutive transactional positions (Office's `clear_decisions` then the fan-out)
are claimed, run and settled in ONE transaction, with the entry's close: an Office Review
arrival is two commits (the step change with its entry record, then the group), and the
group's effects and markers commit together or not at all. A member that raises undoes the
whole transaction, which runs again with that member recorded `failed(cause)` instead of run.
A marker claimed and settled in one transaction stores only its settled event.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.entry import redispatch
from core.store import dialect, events
from tests.on_enter.helpers import World, act, open_world, records

CLEAR = "clear_decisions"
FAN_OUT = "queue_run_for_each_participant"


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


def _review_like(world: World) -> tuple[Any, str]:
    wf = world.flow([act(CLEAR), act(FAN_OUT, role="reviewer")])
    for name in ("rev-a", "rev-b", "rev-c"):
        world.seat(wf, "reviewer", name)
    return wf, world.step_id(wf)


def test_issue14_clear_and_fan_out_commit_together_in_the_arrivals_second_commit(
    world: World,
) -> None:
    """Issue 14 target 2: the arrival is two writer commits - the step change with its entry
    record, then the clear's DELETE, the three runs, both `done` markers and the entry's
    close - and every effect is there exactly once."""
    wf, target = _review_like(world)
    task = world.place(wf, "E2")
    seeded = world.add_decision(task.id, target)
    commits: list[bool] = []

    def count(conn: sa.Connection) -> None:
        if conn.get_execution_options().get(dialect.WRITER_OPTION):
            commits.append(True)

    engine = world.host.store.engine
    sa.event.listen(engine, "commit", count)
    try:
        world.arrive(wf, task.id, "E2")
    finally:
        sa.event.remove(engine, "commit", count)

    assert len(commits) == 2
    assert seeded not in world.decision_ids(task.id, target)
    assert len(world.runs(task.id)) == 3
    ((entry, markers),) = world.entries(task.id)
    assert entry.terminal is True
    assert [(m.position, m.kind, m.state) for m in markers] == [
        (0, CLEAR, "done"),
        (1, FAN_OUT, "done"),
    ]


def test_issue14_a_raising_member_undoes_the_group_and_is_recorded_failed(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """Issue 14 target 2: the fan-out raises after the clear ran in the same transaction.
    The transaction is undone and run again with the fan-out recorded `failed(cause)` instead
    of run: the clear's DELETE commits once, with its `done` marker, no run exists, and the
    entry closes."""
    wf, target = _review_like(world)
    task = world.place(wf, "E2")
    seeded = world.add_decision(task.id, target)

    def broken(*_args: Any) -> Any:
        raise RuntimeError("participants unavailable")

    world.host.participants.fan_out_seats = broken  # type: ignore[method-assign]
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")

    assert world.decision_ids(task.id, target) == []
    assert seeded not in world.decision_ids(task.id, target)
    assert world.runs(task.id) == []
    ((entry, markers),) = world.entries(task.id)
    assert entry.terminal is True
    assert [(m.position, m.kind, m.state) for m in markers] == [
        (0, CLEAR, "done"),
        (1, FAN_OUT, "failed"),
    ]
    assert "participants unavailable" in (markers[1].cause or "")
    # the raise is recorded once, against the fan-out (which logs its own seat failures)
    (raised,) = records(laneway_logs, "DEBUG", task_id=task.id, action_type=FAN_OUT)
    assert raised["message"] == "executor raised"
    assert world.host.tasks.get(task.id).workflow_step_id == target


def test_issue14_a_marker_settled_in_its_claims_transaction_stores_only_its_settled_event(
    world: World,
) -> None:
    """Issue 14 / HTTP.md `entry.marker`: an event exists exactly when its change committed.
    A transactional kind's `in_progress` never commits, so only its `done` event is stored;
    a kind that commits its claim apart (queue_run) keeps both."""
    boss = world.profile("boss")
    wf = world.flow(
        [
            act(CLEAR),
            act(FAN_OUT, role="reviewer"),
            act("queue_run", target=f"agent_profile_id:{boss.id}"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E2")
    world.arrive(wf, task.id, "E2")

    states = [
        (e.data["kind"], e.data["state"])
        for e in events.read_all(world.host.store, task_id=task.id)
        if e.type == "entry.marker"
    ]
    assert states == [
        (CLEAR, "done"),
        (FAN_OUT, "done"),
        ("queue_run", "in_progress"),
        ("queue_run", "done"),
    ]


def test_issue14_a_group_that_meets_its_own_lost_epochs_marker_fences_and_takes_it_over(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """Issue 14 target 2: a transactional group claims under the epoch as last checked, with
    no liveness check first (its claims never commit `in_progress`). Where a lost lock could
    matter - the group meets a marker `in_progress` under this process's own epoch, whose lock
    is gone (others may have declared it dead) - the claim is lost, the lock is checked then,
    the host fences onto a new epoch (one structured WARNING), and the group runs again under
    it: the markers are taken over and settled, as a check before the claim did."""
    if not world.host.store.is_sqlite:
        pytest.skip("the lock file is SQLite's liveness lock")
    wf, target = _review_like(world)
    task = world.place(wf, "E2")
    world.arrive(wf, task.id, "E2")
    old = world.host.epoch
    assert old is not None
    world.reopen(task.id, 0, epoch=old)
    world.reopen(task.id, 1, epoch=old)
    directory = dialect.sqlite_path(world.host.store.url)
    assert directory is not None
    lock = directory.resolve().with_name(directory.resolve().name + ".epochs") / f"{old}.lock"
    lock.unlink()
    ((entry, _markers),) = world.entries(task.id)
    _workflow, step = world.host.kernel.read.step(target)
    laneway_logs.clear()

    end = redispatch(world.host, world.host.tasks.get(task.id), step, entry)

    assert end == "completed"
    new = world.host.epoch
    assert new is not None
    assert new != old
    fences = records(laneway_logs, "WARNING", old_epoch=old)
    assert len(fences) == 1
    assert fences[0]["extra"]["epoch"] == new
    ((entry, markers),) = world.entries(task.id)
    assert entry.terminal is True
    assert [(m.position, m.state) for m in markers] == [(0, "done"), (1, "done")]
    assert len(world.runs(task.id)) == 3  # the replayed fan-out found its keys: no new run


def test_issue14_a_group_whose_claim_up_front_meets_a_held_marker_runs_again_member_by_member(
    world: World,
) -> None:
    """Issue 14 target 2: the group claims all its members, with the occupancy check, in one
    statement. When that claims only some (here the clear's marker is absent, the fan-out's is
    `in_progress` under a dead epoch), the transaction is undone and the group runs again
    claiming member by member: the clear runs once (its DELETE commits with its `done`
    marker), the fan-out's stale marker is taken over and its replay enqueues nothing new,
    and the entry closes."""
    wf, target = _review_like(world)
    task = world.place(wf, "E2")
    world.arrive(wf, task.id, "E2")
    ((entry, _markers),) = world.entries(task.id)
    world.reopen(task.id, 1)  # the fan-out's marker: in_progress under a dead epoch
    m = sa.table("step_entry_markers", sa.column("entry_id"), sa.column("position"))
    with world.host.store.transaction() as uow:  # the clear's marker: absent
        uow.conn.execute(sa.delete(m).where(m.c.entry_id == entry.id, m.c.position == 0))
    seeded = world.add_decision(task.id, target)
    runs_before = sorted(r.id for r in world.runs(task.id))
    _workflow, step = world.host.kernel.read.step(target)

    end = redispatch(world.host, world.host.tasks.get(task.id), step, world.entries(task.id)[0][0])

    assert end == "completed"
    assert seeded not in world.decision_ids(task.id, target)
    assert sorted(r.id for r in world.runs(task.id)) == runs_before
    ((entry, markers),) = world.entries(task.id)
    assert entry.terminal is True
    assert [(m.position, m.kind, m.state) for m in markers] == [
        (0, CLEAR, "done"),
        (1, FAN_OUT, "done"),
    ]
