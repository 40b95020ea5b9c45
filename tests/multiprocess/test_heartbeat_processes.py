"""Issue 24 item 4 across real processes: two `laneway worker`s, each running the scheduler,
over several one-second slots: each slot of the task's heartbeat step fires on_heartbeat
exactly once (the operation id's conditional insert decides, no leader). Another host (a
restart) firing nothing for a slot already fired is tests/triggers/test_heartbeats.py's."""

from __future__ import annotations

import signal

import pytest
import sqlalchemy as sa

from core.store import tables as t
from tests.conftest import eventually, open_host
from tests.multiprocess.conftest import Board
from tests.triggers.boards import heartbeat_board

pytestmark = pytest.mark.slow


def _beats(engine: sa.Engine, task_id: str) -> tuple[list[str], int]:
    """The task's applied heartbeat operation ids, and how many heartbeat runs were asked
    for (each evaluation of on_heartbeat queues one; a queued one a later beat joins counts
    each request)."""
    ops_table, runs = t.applied_operations, t.runs
    with engine.connect() as conn:
        ops = sorted(
            str(op)
            for op in conn.execute(
                sa.select(ops_table.c.operation_id).where(
                    ops_table.c.operation_id.startswith(f"heartbeat:{task_id}:"),
                    ops_table.c.state == "applied",
                )
            ).scalars()
        )
        asked = conn.execute(
            sa.select(sa.func.coalesce(sa.func.sum(runs.c.coalesced_count), 0)).where(
                runs.c.task_id == task_id, runs.c.reason == "heartbeat"
            )
        ).scalar_one()
    return ops, int(asked)


def test_two_workers_fire_each_slot_once(board: Board) -> None:
    with open_host(board.url) as host:
        _wf, [task] = heartbeat_board(host, 1)
    engine = sa.create_engine(board.url.replace("postgresql://", "postgresql+psycopg://", 1))
    workers = [board.spawn("worker") for _ in range(2)]
    try:
        eventually(lambda: len(_beats(engine, task.id)[0]) >= 3, timeout=30, what="3 slots")
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            proc.wait(timeout=30)
    ops, asked = _beats(engine, task.id)
    engine.dispose()
    slots = [int(op.rsplit(":", 1)[1]) for op in ops]
    assert len(set(slots)) == len(slots) == asked  # one evaluation per slot, never two
