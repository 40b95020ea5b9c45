"""spec/on-enter-action-dispatch, group B (identity, idempotency, re-entry): AC-B1, AC-B2 and
AC-B5 for in-process double dispatch, AC-B3, AC-B4, AC-B7 (and AC-B8's "no marker" side).

The restart and crash halves of AC-B2/AC-B5/AC-B9 live with the recovery tests. AC-B4 needs an
action that really runs a second time with the same key, which only a re-claimed (stale)
marker produces, so its test stands a second host on the same database in for the restart.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import entry as entry_dispatch
from core import ids, ledger
from core.errors import LanewayError
from core.services.runs import RunService
from core.store import tables as t
from core.store.database import UnitOfWork
from tests.on_enter.helpers import (
    PATHS,
    KindsPlugin,
    Timeline,
    World,
    act,
    entry_path,
    fan_out_infos,
    open_host,
    open_world,
    problems,
    records,
)


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


def _redispatch(world: World, task_id: str, entry_seq: int = 1) -> str:
    """Dispatch an already-committed entry again (the spec's "processed more than once")."""
    for entry, _markers in world.entries(task_id):
        if entry.entry_seq == entry_seq:
            _wf, step = world.host.workflows.step_by_id(entry.step_id)
            return entry_dispatch.redispatch(world.host, world.host.tasks.get(task_id), step, entry)
    raise AssertionError("no such entry")


# -- AC-B1 -----------------------------------------------------------------------------------------


def test_ac_b1_keys_differ_by_entry_position_and_agent(world: World) -> None:
    """AC-B1: every on_enter run carries a key derived from the entry identity, position and
    target agent: two entries of one step, two positions declaring the same fan-out, and two
    agents give eight runs with eight distinct keys."""
    wf = world.flow(
        [
            act("queue_run_for_each_participant", role="reviewer"),
            act("clear_decisions"),
            act("queue_run_for_each_participant", role="reviewer"),
        ]
    )
    world.seat(wf, "reviewer", "r1")
    world.seat(wf, "reviewer", "r2", position=1)
    task = world.enter(wf, "E1")
    world.host.turns.complete(task.id)  # back to Src
    world.arrive(wf, task.id, "E1")  # second entry
    runs = world.runs(task.id)
    assert len(runs) == 8
    keys = [r.idempotency_key for r in runs]
    assert None not in keys
    assert len(set(keys)) == 8


# -- AC-B2 / AC-B5 (in-process double dispatch) ----------------------------------------------------


def test_ac_b2_b5_dispatching_a_committed_entry_again_repeats_nothing(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B2 / AC-B5 (Verification: "the entry dispatched twice against the same committed
    step-entry record"): after the arrival's own dispatch, two more dispatches of the same
    entry perform no second clear_decisions delete (a decision recorded since survives) and
    enqueue no second run for any participant; terminal markers are never re-executed."""
    boss = world.profile("boss")
    wf = world.flow(
        [
            act("clear_decisions"),
            act("queue_run_for_each_participant", role="reviewer"),
            act("queue_run", target=f"agent_profile_id:{boss.id}"),
            act("run_code_review"),
        ]
    )
    r1 = world.seat(wf, "reviewer", "r1")
    world.seat(wf, "reviewer", "r2", position=1)
    task = world.enter(wf, "E2")
    world.host.decisions.record(task.id, "Target", r1, "approved")  # this round's vote
    votes = world.decision_ids(task.id, world.step_id(wf))
    runs_before = [r.id for r in world.runs(task.id)]
    assert len(runs_before) == 3
    timeline = Timeline().install(world.host)
    laneway_logs.clear()

    _redispatch(world, task.id)
    _redispatch(world, task.id)

    assert timeline.events == []  # nothing took effect again: no clear, no enqueue, no review
    assert world.decision_ids(task.id, world.step_id(wf)) == votes
    assert [r.id for r in world.runs(task.id)] == runs_before
    assert len(world.reviews(task.id)) == 1
    assert problems(laneway_logs) == []


def test_ac_b5_each_reached_position_gets_a_durable_terminal_marker(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B5: a marker for every engine-owned position reached: done (a), skipped(reason) (b),
    failed(cause) (c); session kinds get none (AC-B8). A terminal marker is never executed
    again, and its AC-A6/AC-C3 diagnostic is emitted once, not on every later observation."""
    wf = world.flow(
        [
            act("frobnicate"),
            act("clear_decisions"),
            act("queue_run", target="participant_role:approver"),  # nobody: fails
            act("reset_agent_context"),
            act("queue_run_for_each_participant", role="reviewer"),
            act("t_fail", cause="probe failure"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.enter(wf, "E2")
    ((entry, markers),) = world.entries(task.id)
    got = {m.position: (m.kind, m.state, m.reason) for m in markers}
    assert got == {
        0: ("frobnicate", "skipped", "unrecognised"),
        1: ("clear_decisions", "done", None),
        2: ("queue_run", "failed", None),
        4: ("queue_run_for_each_participant", "done", None),
        5: ("t_fail", "failed", None),
    }
    by_pos = {m.position: m for m in markers}
    assert by_pos[2].cause
    assert by_pos[5].cause == "probe failure"
    assert entry.terminal is True
    first = [(r["level"], r["extra"].get("action_type")) for r in problems(laneway_logs)]
    assert sorted(first) == sorted(
        [("WARNING", "frobnicate"), ("ERROR", "queue_run"), ("ERROR", "t_fail")]
    )
    laneway_logs.clear()
    timeline = Timeline().install(world.host)
    _redispatch(world, task.id)
    assert timeline.events == []
    assert problems(laneway_logs) == []
    assert len(world.runs(task.id)) == 1
    assert {(m.position, m.state) for m in world.entries(task.id)[0][1]} == {
        (p, s) for p, (_k, s, _r) in got.items()
    }


# -- AC-B3 -----------------------------------------------------------------------------------------


def test_ac_b3_reentry_is_a_new_entry_with_a_fresh_clear_and_fan_out(world: World) -> None:
    """AC-B3: enter, reject, return, re-enter inside the 24-hour window: a new entry_seq, a
    fresh clear_decisions (the rejection is gone) and a fresh fan-out whose run is not
    suppressed by the previous entry's key."""
    wf = world.flow(
        [act("clear_decisions"), act("queue_run_for_each_participant", role="reviewer")]
    )
    seat = world.seat(wf, "reviewer", "rev")
    task = world.enter(wf, "E1")
    world.host.decisions.record(task.id, "Target", seat, "rejected")
    assert len(world.decision_ids(task.id, world.step_id(wf))) == 1
    world.host.turns.complete(task.id)  # Target -> Src: the rejection round
    world.arrive(wf, task.id, "E1")  # and back
    assert world.decision_ids(task.id, world.step_id(wf)) == []
    entries = world.entries(task.id)
    target_entries = [e for e, _ in entries if e.step_id == world.step_id(wf)]
    assert [(e.entry_seq, e.terminal) for e in target_entries] == [(1, True), (2, True)]
    runs = world.runs(task.id)
    assert [(r.agent_profile_id, r.status) for r in runs] == [
        (world.profile("rev").id, "queued")
    ] * 2
    assert runs[0].idempotency_key != runs[1].idempotency_key


# -- AC-B4 -----------------------------------------------------------------------------------------


def test_ac_b4_a_suppressed_replay_counts_as_success_and_is_not_retried(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B4: the fan-out's runs committed while its marker stayed in_progress under a dead
    epoch (what a fan-out recorded apart from its runs leaves; the fan-out itself now commits
    runs and marker together, see test_crash); the next host re-claims the stale marker and
    runs the fan-out again with identical keys. Each enqueue is idempotency-suppressed, counts
    as a successful enqueue (AC-G1 enqueued=2, suppressed=2), the action is marked done (not
    failed), and nothing is retried."""
    plugin = KindsPlugin()
    files = tmp_path / "files"
    files.mkdir()

    with open_host(db_url, plugin) as first:
        world = World(first, files, plugin, db_url)
        wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
        world.seat(wf, "reviewer", "r1")
        world.seat(wf, "reviewer", "r2", position=1)
        task = world.place(wf, "E2")
        world.arrive(wf, task.id, "E2")
        world.reopen(task.id, 0)
        runs_before = sorted(r.id for r in world.runs(task.id))
        assert len(runs_before) == 2
        assert world.markers(task.id)[0].state == "in_progress"

    calls: list[str] = []
    enqueue = RunService.enqueue

    def counting(self: RunService, request: Any) -> Any:
        calls.append(request.agent_profile_id)
        return enqueue(self, request)

    monkeypatch.setattr(RunService, "enqueue", counting)
    laneway_logs.clear()
    with open_host(db_url, plugin) as second:  # its recovery scan re-dispatches the entry
        world = World(second, files, plugin, db_url)
        assert sorted(r.id for r in world.runs(task.id)) == runs_before
        assert len(calls) == 2  # one attempt per participant: no retry
        (info,) = fan_out_infos(laneway_logs, task.id)
        assert (
            info["extra"]["matching"],
            info["extra"]["enqueued"],
            info["extra"]["suppressed"],
        ) == (2, 2, 2)
        marker = world.markers(task.id)[0]
        assert marker.state == "done"
        assert world.entries(task.id)[0][0].terminal is True
        assert records(laneway_logs, "ERROR") == []


# -- AC-B7 -----------------------------------------------------------------------------------------


_REAL_ALLOCATE = ledger.allocate


def _forced_failure(uow: Any, registry: Any, task_id: str, step: Any, path: str) -> Any:
    """Allocation into a step named Target fails; every other allocation is the real one."""
    if step.name == "Target":
        raise sa.exc.IntegrityError("INSERT INTO step_entries ...", {}, Exception("forced"))
    return _REAL_ALLOCATE(uow, registry, task_id, step, path)


@pytest.mark.parametrize("path", [p for p in PATHS if p != "E3"])
def test_ac_b7_allocation_failure_fails_the_transition_as_a_unit(
    world: World,
    path: str,
    monkeypatch: pytest.MonkeyPatch,
    laneway_logs: list[dict[str, Any]],
) -> None:
    """AC-B7: record allocation forced to fail: the step change does not land (the task is
    where it was, no history row), no on_enter action ran, and an ERROR record names the task
    id and step id."""
    wf = world.flow(
        [
            act("reset_agent_context"),
            act("clear_decisions"),
            act("queue_run_for_each_participant", role="reviewer"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, path)
    target = world.step_id(wf)
    seeded = world.add_decision(task.id, target)
    before = world.host.tasks.get(task.id)
    timeline = Timeline().install(world.host)
    monkeypatch.setattr(ledger, "allocate", _forced_failure)
    laneway_logs.clear()

    with pytest.raises(LanewayError):
        world.arrive(wf, task.id, path)

    after = world.host.tasks.get(task.id)
    assert (after.workflow_id, after.workflow_step_id) == (
        before.workflow_id,
        before.workflow_step_id,
    )
    assert world.entries(task.id) == []
    assert timeline.events == []
    assert world.decision_ids(task.id, target) == [seeded]
    assert world.runs(task.id) == []
    assert "context_resets" not in world.meta(task.id)
    with world.host.store.read() as conn:
        h = t.session_step_history
        assert conn.execute(sa.select(h.c.id).where(h.c.task_id == task.id)).all() == []
    (error,) = records(laneway_logs, "ERROR", task_id=task.id, step_id=target)
    assert error["extra"]["entry_path"] == entry_path(path)


def test_ac_b7_allocation_failure_on_promotion_leaves_the_task_queued(
    world: World, monkeypatch: pytest.MonkeyPatch, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B7 on E3: the promotion whose record cannot be written does not admit the task (it
    stays queued, nothing runs) and the ERROR names the promoted task and the step. The move
    that vacated the step is a separate, committed transition and stands."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E3")
    holder = world.holders[task.id]
    monkeypatch.setattr(ledger, "allocate", _forced_failure)
    laneway_logs.clear()
    with contextlib.suppress(LanewayError):
        world.host.tasks.move(holder, "Out")
    assert world.host.tasks.get(holder).workflow_step_id == world.step_id(wf, "Out")
    queued = world.host.tasks.get(task.id)
    assert (queued.workflow_step_id, queued.wip_admitted) == (world.step_id(wf), False)
    assert world.entries(task.id) == []
    assert world.runs(task.id) == []
    assert records(laneway_logs, "ERROR", task_id=task.id, step_id=world.step_id(wf))


def test_ac_b7_unique_constraint_rejects_a_second_row_with_the_same_entry_seq(
    world: World,
) -> None:
    """AC-B7 / Execution model: monotonicity is enforced by UNIQUE (task_id, step_id,
    entry_seq): a second row carrying an allocated entry_seq is rejected, not committed."""
    wf = world.flow([act("clear_decisions")])
    task = world.enter(wf, "E2")
    ((entry, _),) = world.entries(task.id)
    with (
        pytest.raises(sa.exc.IntegrityError),
        world.host.store.transaction() as uow,
    ):
        uow.conn.execute(
            sa.insert(t.step_entries).values(
                id=ids.new_id(),
                task_id=task.id,
                step_id=entry.step_id,
                entry_seq=entry.entry_seq,
                entry_path="E2",
                declaration_digest=entry.declaration_digest,
                terminal=True,
                created_at=ids.now(),
            )
        )
    assert [e.id for e, _ in world.entries(task.id)] == [entry.id]


class _StaleResult:
    def __init__(self, value: int) -> None:
        self.value = value

    def scalar_one(self) -> int:
        return self.value

    def scalar(self) -> int:
        return self.value


class _Overtaken:
    """The allocator's unit of work as seen by an allocator that computed the pair's next
    entry_seq just before a rival allocator committed that successor. The allocation is one
    statement (issue 14: the maximum is read in the INSERT itself), so the staging replaces
    that one statement by the insert such an allocator makes: the same row, with the
    entry_seq the maximum gave before the rival's row existed. The insert is the product's
    row, against the real table and its constraint; nothing else is changed."""

    def __init__(self, uow: Any) -> None:
        self._uow = uow
        self._staged = False
        self.conn = uow.conn

    def run(self, statement: Any, values: Any) -> Any:
        if statement is not ledger._allocate() or self._staged:
            return self._uow.run(statement, values)
        self._staged = True
        entries = t.step_entries
        newest = self._uow.conn.execute(
            sa.select(sa.func.max(entries.c.entry_seq)).where(
                entries.c.task_id == values["task_id"], entries.c.step_id == values["step_id"]
            )
        ).scalar_one()
        stale = int(newest or 0)  # the rival's row not yet seen: its entry_seq again
        self._uow.conn.execute(sa.insert(entries).values(**values, entry_seq=stale, terminal=False))
        return _StaleResult(stale)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._uow, name)


def _rival_row(task_id: str, step_id: str, entry_seq: int = 1) -> dict[str, Any]:
    return {
        "id": ids.new_id(),
        "task_id": task_id,
        "step_id": step_id,
        "entry_seq": entry_seq,
        "entry_path": "E2",
        "declaration_digest": "rival",
        "terminal": True,
        "created_at": ids.now(),
    }


def test_ac_b7_two_allocators_racing_one_pair_the_loser_fails_as_a_unit(
    world: World, monkeypatch: pytest.MonkeyPatch, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B7 race (Verification: "two allocators against one (task_id, step_id), asserting
    the UNIQUE constraint rejects one rather than both committing the same entry_seq"): a rival
    row with the next entry_seq is committed directly; the allocator, whose read of the maximum
    predates it, writes the same entry_seq and loses on the constraint. Its transition fails as
    a unit (task not moved, nothing ran) with the AC-B7 ERROR naming task and step; the
    rival's row is the only one. (One writer connection serialises allocators inside a
    process, so the stale read is staged; the PostgreSQL-only test below races for real.)"""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E2")
    target = world.step_id(wf)
    rival = _rival_row(task.id, target)
    with world.host.store.transaction() as uow:
        uow.conn.execute(sa.insert(t.step_entries).values(**rival))
    real_allocate = ledger.allocate

    def overtaken(uow: UnitOfWork, *args: Any, **kwargs: Any) -> Any:
        return real_allocate(_Overtaken(uow), *args, **kwargs)

    monkeypatch.setattr(ledger, "allocate", overtaken)
    laneway_logs.clear()
    try:
        with pytest.raises(LanewayError):
            world.arrive(wf, task.id, "E2")
    finally:
        monkeypatch.setattr(ledger, "allocate", real_allocate)
        # whatever escaped, the step change and the losing row did not land
        assert world.host.tasks.get(task.id).workflow_step_id == world.step_id(wf, "Src")
        assert [(e.id, e.entry_seq) for e, _ in world.entries(task.id)] == [(rival["id"], 1)]
        assert world.runs(task.id) == []
    assert records(laneway_logs, "ERROR", task_id=task.id, step_id=target)


def test_ac_b7_real_race_on_postgresql_the_loser_fails_as_a_unit(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B7 race, for real (PostgreSQL: row-level locking lets a rival transaction hold an
    uncommitted row with the next entry_seq): the allocator reads the committed maximum, its
    INSERT waits on the rival's unique-index entry, the rival commits, the allocator's INSERT
    fails on UNIQUE (task_id, step_id, entry_seq). Its transition fails as a unit with the
    AC-B7 ERROR; only the rival's row exists."""
    if world.host.store.is_sqlite:
        pytest.skip("SQLite has one writer at a time: no rival transaction can hold a row")
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E2")
    target = world.step_id(wf)
    rival = _rival_row(task.id, target)
    engine = sa.create_engine(world.host.store.url)
    outcome: dict[str, BaseException | None] = {}
    try:
        with engine.connect() as rival_conn:
            rival_tx = rival_conn.begin()
            rival_conn.execute(sa.insert(t.step_entries).values(**rival))

            def mover() -> None:
                try:
                    world.arrive(wf, task.id, "E2")
                    outcome["error"] = None
                except BaseException as exc:  # noqa: BLE001 - reported below
                    outcome["error"] = exc

            thread = threading.Thread(target=mover)
            thread.start()
            deadline = time.monotonic() + 10
            with engine.connect() as watcher:
                while time.monotonic() < deadline:
                    waiting = watcher.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
                        )
                    ).scalar_one()
                    if waiting:
                        break
                    time.sleep(0.02)
                else:
                    raise AssertionError("the allocator never waited on the rival's row")
            rival_tx.commit()
            thread.join(10)
            assert not thread.is_alive()
    finally:
        engine.dispose()
    assert world.host.tasks.get(task.id).workflow_step_id == world.step_id(wf, "Src")
    assert [(e.id, e.entry_seq) for e, _ in world.entries(task.id)] == [(rival["id"], 1)]
    assert world.runs(task.id) == []
    assert isinstance(outcome["error"], LanewayError), repr(outcome["error"])
    assert records(laneway_logs, "ERROR", task_id=task.id, step_id=target)
