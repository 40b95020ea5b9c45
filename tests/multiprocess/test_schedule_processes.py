"""Issue 42 item 4 across real processes: two `laneway worker`s, each running the scheduler,
over several slots of a schedule: one task per slot, never two (the conditional UPDATE of the
schedule's last slot decides, no leader); and after both stop and slots go by with nothing
running, a restarted worker makes one task for the current slot, none for the missed ones."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
import sqlalchemy as sa

from core.store import tables as t
from tests.conftest import eventually
from tests.multiprocess.conftest import Board

pytestmark = pytest.mark.slow

EVERY = 2


def _slots(engine: sa.Engine, schedule_id: str) -> tuple[list[int], int]:
    """The slot starts whose operation ids were recorded, and how many tasks it made."""
    ops = t.applied_operations
    with engine.connect() as conn:
        found = sorted(
            int(str(op).rsplit(":", 1)[1])
            for op in conn.execute(
                sa.select(ops.c.operation_id).where(
                    ops.c.operation_id.startswith(f"schedule:{schedule_id}:")
                )
            ).scalars()
        )
        made = conn.execute(
            sa.select(sa.func.count()).select_from(t.tasks).where(t.tasks.c.title == "tick")
        ).scalar_one()
    return found, int(made)


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=30)


def test_issue_42_item_4_two_workers_one_task_per_slot_and_one_after_a_restart(
    board: Board,
) -> None:
    board.json("workflow", "create", "--template", "simple")
    made = board.json(
        "schedule", "add", "--workflow", "Kanban", "--title", "tick", "--every", str(EVERY)
    )
    engine = sa.create_engine(board.url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        workers = [board.spawn("worker") for _ in range(2)]
        try:
            eventually(lambda: len(_slots(engine, made["id"])[0]) >= 3, timeout=60, what="3 slots")
        finally:
            _stop(workers)
        before, made_before = _slots(engine, made["id"])
        assert len(set(before)) == len(before) == made_before  # one task per slot, never two
        assert all(s % EVERY == 0 for s in before)

        # nothing runs for several slots; the restart's current slot is the only one made
        time.sleep(3 * EVERY + 0.5)
        restart = int(time.time())
        again = board.spawn("worker")
        try:
            eventually(
                lambda: len(_slots(engine, made["id"])[0]) > len(before),
                timeout=60,
                what="a task after the restart",
            )
        finally:
            _stop([again])
        after, made_after = _slots(engine, made["id"])
    finally:
        engine.dispose()
    new = after[len(before) :]
    assert after[: len(before)] == before
    assert len(set(after)) == len(after) == made_after
    # none for the slots missed while nothing ran: each new one is the restart's slot or later
    assert new
    assert all(s >= restart - restart % EVERY for s in new)
