"""Two threads moving one task at once: each call that changed the step committed exactly one
step change, and the dispatcher saw each committed arrival exactly once."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import sqlalchemy as sa

from core.store import tables as t
from tests.transitions.conftest import Board, arrivals


def test_concurrent_moves_of_one_task(board: Board, laneway_logs: list[dict[str, Any]]) -> None:
    task = board.task()
    targets = ["Inbox", "Check", "Done", "Doing"] * 10
    results: dict[int, list[bool]] = {0: [], 1: []}
    barrier = threading.Barrier(2)

    def mover(me: int) -> None:
        barrier.wait()
        for i in range(len(targets)):
            # the two threads walk the targets out of phase, so they collide often
            name = targets[(i + me) % len(targets)]
            before = board.host.tasks.get(task.id).workflow_step_id
            moved = board.host.tasks.move(task.id, name)
            results[me].append(moved.workflow_step_id != before)

    threads = [threading.Thread(target=mover, args=(n,)) for n in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()

    with board.host.store.read() as conn:
        history = list(
            conn.execute(
                sa.select(
                    t.session_step_history.c.from_step_id, t.session_step_history.c.to_step_id
                )
                .where(t.session_step_history.c.task_id == task.id)
                .order_by(t.session_step_history.c.created_at, t.session_step_history.c.id)
            )
        )
    seen = [a for a in arrivals(laneway_logs) if a["task_id"] == task.id]
    # every committed change has one history row and one dispatch, no more, no fewer
    assert len(seen) == len(history) > 0
    assert len(board.probe.seen) == len(history)
    # the history is a chain: each change starts where the previous one ended
    for (_f1, to1), (from2, _t2) in itertools.pairwise(history):
        assert from2 == to1
    # each dispatch saw its own change already committed
    assert all(p["committed_step_id"] is not None for p in board.probe.seen)
    assert sorted(a["step_id"] for a in seen) == sorted(to for _f, to in history)
