"""spec/on-enter-action-dispatch, group F (concurrency): AC-F1, AC-F2, AC-F3.

Two dispatches of one entry are the arrival's own dispatch (`host.tasks.move` in a thread) and
a second dispatch of the same committed record (`core.entry.redispatch`, the spec's "dispatch
twice"), in one host: both carry the host's epoch, so each sees the other as a live peer.

How laneway's store shapes these tests: it has ONE writer connection guarded by a lock, and a
transaction holds that lock from begin to commit. A claim is a compare-and-set inside a
transaction, so a dispatcher whose peer holds an open transaction (clear_decisions' claim,
DELETE and done-marker commit together, AC-B6) waits for the peer's commit before it can even
look at the marker. The tests therefore assert what can be observed: outcomes, counts, silence,
and the order of commits relative to enqueues.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import entry as entry_dispatch
from tests.on_enter.helpers import World, act, open_world, problems

WAIT = 20


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


class Worker(threading.Thread):
    """A thread that keeps its target's result or exception."""

    def __init__(self, target: Any) -> None:
        super().__init__(daemon=True)
        self._fn = target
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by finish()
            self.error = exc

    def finish(self) -> Any:
        self.join(WAIT)
        assert not self.is_alive(), "thread did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def _redispatch(world: World, task_id: str, entry_seq: int = 1) -> str:
    for entry, _markers in world.entries(task_id):
        if entry.entry_seq == entry_seq:
            _wf, step = world.host.workflows.step_by_id(entry.step_id)
            return entry_dispatch.redispatch(world.host, world.host.tasks.get(task_id), step, entry)
    raise AssertionError(f"no entry {entry_seq}")


# -- AC-F1 -----------------------------------------------------------------------------------------


def test_ac_f1_concurrent_dispatch_of_one_entry_loser_abandons_silently(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F1: dispatcher A (the arrival) holds position 0's claim and is executing it (a
    blocking durable kind that holds no transaction); dispatcher B dispatches the same entry,
    loses the claim to its live peer and abandons the entry: it returns without executing or
    attempting any later position (no run appears while A is still on position 0) and emits
    no WARNING or ERROR. A then finishes: each action executed exactly once."""
    boss = world.profile("boss")
    wf = world.flow(
        [
            act("t_block"),
            act("queue_run_for_each_participant", role="reviewer"),
            act("queue_run", target=f"agent_profile_id:{boss.id}"),
        ]
    )
    world.seat(wf, "reviewer", "r1")
    world.seat(wf, "reviewer", "r2", position=1)
    task = world.place(wf, "E2")
    laneway_logs.clear()
    a = Worker(lambda: world.arrive(wf, task.id, "E2"))
    a.start()
    assert world.plugin.blocked.wait(WAIT)
    try:
        b = Worker(lambda: _redispatch(world, task.id))
        b.start()
        assert b.finish() == "abandoned"
        assert world.runs(task.id) == []  # B did not skip ahead to positions 1 and 2
        assert world.plugin.block_runs == [1]
    finally:
        world.plugin.release.set()
    a.finish()
    assert sorted(r.agent_profile_id for r in world.runs(task.id)) == sorted(
        [world.profile("r1").id, world.profile("r2").id, boss.id]
    )
    assert world.plugin.block_runs == [1]
    ((entry, markers),) = world.entries(task.id)
    assert entry.terminal is True
    assert [m.state for m in markers] == ["done", "done", "done"]
    assert problems(laneway_logs) == []


def test_ac_f1_two_distinct_entries_of_one_step_the_newer_runs_in_full_the_older_yields(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F1, the other half: the claim is scoped to the entry, not to (task, step). While
    entry 1 is still executing position 0, the task leaves and re-enters the step; entry 2
    is never suppressed: it runs in full at once, one run per reviewer with its own keys.

    Issue "Many processes, one board", item 7 (newer entries win, live as in recovery)
    governs what entry 1 does afterwards: its next durable effect would commit after the task
    re-entered, so its position settles skipped(superseded) and the entry closes, exactly as
    the recovery scan (AC-B9 (a2)) closes it; the first spec reading ("both execute in full")
    queued a stale round's runs beside the live round's."""
    wf = world.flow([act("t_block"), act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "r1")
    world.seat(wf, "reviewer", "r2", position=1)
    task = world.place(wf, "E2")
    laneway_logs.clear()
    a = Worker(lambda: world.arrive(wf, task.id, "E2"))
    a.start()
    assert world.plugin.blocked.wait(WAIT)
    try:
        world.host.tasks.move(task.id, "Out")
        world.host.tasks.move(task.id, "Target")  # entry 2, while entry 1 is mid-walk
        runs = world.runs(task.id)
        assert len(runs) == 2  # entry 2's fan-out ran in full
        assert world.plugin.block_runs == [1, 2]
    finally:
        world.plugin.release.set()
    a.finish()
    target = [(e, m) for e, m in world.entries(task.id) if e.step_id == world.step_id(wf)]
    assert [(e.entry_seq, e.terminal) for e, _ in target] == [(1, True), (2, True)]
    (_first, older), (_second, newer) = target
    assert all(m.state == "done" for m in newer)
    assert [(m.kind, m.state) for m in older] == [
        ("t_block", "done"),
        ("queue_run_for_each_participant", "skipped"),
    ]
    assert older[1].reason == "superseded"
    runs = world.runs(task.id)
    assert len(runs) == 2
    assert len({r.idempotency_key for r in runs}) == 2
    assert problems(laneway_logs) == []


def test_ac_f1_stop_rule_loser_enqueues_nothing_before_the_clear_commits(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F1 stop rule (Verification): a step declaring [clear_decisions,
    queue_run_for_each_participant]; dispatcher A holds the clear_decisions claim and is
    blocked mid-delete (its DELETE executed, its transaction open); dispatcher B arrives at
    the same entry. Assert B enqueues no run before A's delete commits.

    How the single-writer store realises the rule: A's claim, DELETE and done-marker live in
    one transaction on the one writer connection (AC-B6), and the writer lock is held until
    that transaction commits. B's compare-and-set on the clear_decisions marker needs that
    connection, so B waits on the lock rather than observing a foreign in_progress marker;
    when it gets in, the marker is already terminal (or it loses a later claim and abandons).
    Either way B cannot skip ahead of the uncommitted clear. The assertion is about ordering,
    not totals: while A is blocked, no run exists and B has not returned; every enqueue that
    ever happens sees the clear already committed (its decision gone, its marker done)."""
    wf = world.flow(
        [act("clear_decisions"), act("queue_run_for_each_participant", role="reviewer")]
    )
    world.seat(wf, "reviewer", "r1")
    world.seat(wf, "reviewer", "r2", position=1)
    target = world.step_id(wf)
    task = world.place(wf, "E2")
    stale = world.add_decision(task.id, target)

    in_delete, release = threading.Event(), threading.Event()
    clear = world.host.decisions.clear

    def blocking_clear(uow: Any, task_id: str, step_id: str) -> int:
        removed = clear(uow, task_id, step_id)  # the DELETE has run; COMMIT has not
        if not in_delete.is_set():
            in_delete.set()
            assert release.wait(WAIT)
        return removed

    observed: list[tuple[list[str], str | None]] = []
    enqueue = world.host.runs.enqueue

    def observing_enqueue(request: Any) -> Any:
        marker = world.markers(task.id)[0]
        observed.append((world.decision_ids(task.id, target), marker.state))
        return enqueue(request)

    world.host.decisions.clear = blocking_clear  # type: ignore[method-assign]
    world.host.runs.enqueue = observing_enqueue  # type: ignore[method-assign]
    laneway_logs.clear()
    a = Worker(lambda: world.arrive(wf, task.id, "E2"))
    a.start()
    assert in_delete.wait(WAIT)
    try:
        b = Worker(lambda: _redispatch(world, task.id))
        b.start()
        time.sleep(0.5)  # B has had ample time to act, were it free to
        assert b.is_alive(), "B got past an uncommitted clear_decisions"
        assert world.runs(task.id) == []
        assert observed == []
        assert world.decision_ids(task.id, target) == [stale]  # the DELETE is not committed
    finally:
        release.set()
    a.finish()
    assert b.finish() in ("completed", "abandoned")
    assert observed, "the fan-out never ran"
    assert all(seen == ([], "done") for seen in observed)
    assert sorted(r.agent_profile_id for r in world.runs(task.id)) == sorted(
        [world.profile("r1").id, world.profile("r2").id]
    )
    assert problems(laneway_logs) == []


# -- AC-F2 -----------------------------------------------------------------------------------------


def test_ac_f2_participant_added_after_the_read_gets_no_run(world: World) -> None:
    """AC-F2: the fan-out acts on the participant set read once at the start of its
    execution: a reviewer added while it is enqueueing (after the read) receives no run for
    that entry; the set is not re-read mid-fan-out. (The added seat does match: the next
    entry gives it a run.)"""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "r1")
    world.seat(wf, "reviewer", "r2", position=1)
    late = world.profile("late")
    task = world.place(wf, "E2")
    enqueue = world.host.runs.enqueue
    added: list[str] = []

    def adding_enqueue(request: Any) -> Any:
        if not added:
            added.append(world.seat(wf, "reviewer", "late", position=5))
        return enqueue(request)

    world.host.runs.enqueue = adding_enqueue  # type: ignore[method-assign]
    world.arrive(wf, task.id, "E2")
    assert added
    agents = [r.agent_profile_id for r in world.runs(task.id)]
    assert sorted(agents) == sorted([world.profile("r1").id, world.profile("r2").id])
    world.host.tasks.move(task.id, "Out")
    world.host.tasks.move(task.id, "Target")
    assert [r.agent_profile_id for r in world.runs(task.id)].count(late.id) == 1


# -- AC-F3 -----------------------------------------------------------------------------------------


def test_ac_f3_the_delete_commit_is_the_line_decisions_fall_on(world: World) -> None:
    """AC-F3 (both sides): a decision committed before clear_decisions' DELETE is deleted; a
    decision recorded concurrently, while the clear's transaction is open, commits after the
    DELETE and survives alongside a successful clear (done marker)."""
    wf = world.flow(
        [act("clear_decisions"), act("queue_run_for_each_participant", role="reviewer")]
    )
    seat = world.seat(wf, "reviewer", "r1")
    target = world.step_id(wf)
    task = world.place(wf, "E2")
    before = world.host.decisions.record(task.id, "Target", seat, "rejected")["decision"].id

    in_delete, release = threading.Event(), threading.Event()
    clear = world.host.decisions.clear

    def blocking_clear(uow: Any, task_id: str, step_id: str) -> int:
        removed = clear(uow, task_id, step_id)
        if not in_delete.is_set():
            in_delete.set()
            assert release.wait(WAIT)
        return removed

    world.host.decisions.clear = blocking_clear  # type: ignore[method-assign]
    a = Worker(lambda: world.arrive(wf, task.id, "E2"))
    a.start()
    assert in_delete.wait(WAIT)
    try:
        voter = Worker(lambda: world.host.decisions.record(task.id, "Target", seat, "approved"))
        voter.start()
        time.sleep(0.3)
    finally:
        release.set()
    a.finish()
    after = voter.finish()["decision"].id
    assert world.decision_ids(task.id, target) == [after]
    assert before != after
    marker = world.markers(task.id)[0]
    assert (marker.kind, marker.state) == ("clear_decisions", "done")
