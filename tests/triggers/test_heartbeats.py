"""Issue 24 item 4, CLI.md: each task standing at a step with `heartbeat_seconds: N` gets
on_heartbeat once per N-second slot (operation id `heartbeat:<task>:<step>:<slot start>`),
from whichever host runs the scheduler, never twice for one slot; a slot missed while nothing
ran is not fired late, only the current one, once. Which tasks are due is one query a pass."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from core.services.triggers import heartbeat_operation
from core.store import tables as t
from tests.conftest import open_host
from tests.triggers.boards import heartbeat_board

SLOT = 60
T0 = 1_800_000_000 - (1_800_000_000 % SLOT)  # a slot's start


def heartbeat_runs(host: Any, task_id: str) -> int:
    """How many times on_heartbeat queued the runner's run (a queued run a later heartbeat
    joins counts each request)."""
    return sum(r.coalesced_count for r in host.runs.list(task=task_id) if r.reason == "heartbeat")


def test_heartbeat_fires_once_per_slot_across_hosts(db_url: str) -> None:
    with open_host(db_url) as host:
        wf, [task] = heartbeat_board(host, SLOT)
        waiting = host.tasks.create(workflow=wf.id, title="not at the heartbeat step")
        watching = wf.step("Watching")
        assert watching is not None

        report = host.triggers.run_pass(now=T0 + 5)
        assert report.heartbeats == 1
        assert heartbeat_runs(host, task.id) == 1
        assert heartbeat_runs(host, waiting.id) == 0
        assert host.operations.is_applied(heartbeat_operation(task.id, watching.id, T0))
        (run,) = [r for r in host.runs.list(task=task.id) if r.reason == "heartbeat"]
        assert run.workflow_step_id == watching.id

        # the same slot, from this host and from another one: nothing more
        assert host.triggers.run_pass(now=T0 + 30).heartbeats == 0
        with open_host(db_url) as other:
            assert other.triggers.run_pass(now=T0 + SLOT - 1).heartbeats == 0
            # the next slot fires, once, whichever host sees it first
            assert other.triggers.run_pass(now=T0 + SLOT).heartbeats == 1
        assert host.triggers.run_pass(now=T0 + SLOT + 1).heartbeats == 0
        assert heartbeat_runs(host, task.id) == 2

        # nine slots pass with nothing running: only the current one fires, once
        late = T0 + 10 * SLOT + 7
        assert host.triggers.run_pass(now=late).heartbeats == 1
        assert host.triggers.run_pass(now=late + 1).heartbeats == 0
        assert heartbeat_runs(host, task.id) == 3
        with host.store.read() as conn:
            beats = sorted(
                str(op)
                for op in conn.execute(
                    sa.select(t.applied_operations.c.operation_id).where(
                        t.applied_operations.c.operation_id.startswith(f"heartbeat:{task.id}:")
                    )
                ).scalars()
            )
        assert beats == sorted(
            heartbeat_operation(task.id, watching.id, s) for s in (T0, T0 + SLOT, T0 + 10 * SLOT)
        )

        # a task that left the step, or was archived, beats no more
        host.tasks.move(task.id, "Done")
        assert host.triggers.run_pass(now=T0 + 20 * SLOT).heartbeats == 0


def test_which_tasks_are_due_is_one_query(db_url: str) -> None:
    """Not a query per task: one statement answers for 30 tasks at the step."""
    with open_host(db_url) as host:
        heartbeat_board(host, SLOT, tasks=30)
        statements: list[str] = []

        def count(*args: Any) -> None:
            statements.append(str(args[2]))

        sa.event.listen(host.store.engine, "before_cursor_execute", count)
        try:
            due = host.triggers.due_heartbeats(now=T0)
        finally:
            sa.event.remove(host.store.engine, "before_cursor_execute", count)
        assert len(due) == 30
        assert len([s for s in statements if "applied_operations" in s]) == 1
        assert len(statements) <= 2, statements  # the query (and SQLite's BEGIN, if any)
        assert host.triggers.run_pass(now=T0).heartbeats == 30
        assert host.triggers.due_heartbeats(now=T0 + 1) == []
