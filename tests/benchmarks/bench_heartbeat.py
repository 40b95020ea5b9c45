"""The heartbeat scheduler's cost per pass with 10,000 tasks at heartbeat steps (issue 24).

    python -m tests.benchmarks.bench_heartbeat                 # 10,000 tasks, SQLite
    python -m tests.benchmarks.bench_heartbeat --pg-url URL    # PostgreSQL too
    python -m tests.benchmarks.bench_heartbeat --tasks 2000 --passes 10 --fire 100

A board with one workflow whose step `Watching` has `heartbeat_seconds: 60` and an
on_heartbeat declaration; `--tasks` tasks standing there, inserted with executemany (the
scheduler reads only the tasks, their steps and the operation ids). Timed, alternating, in
the same run:

- baseline: a bare `SELECT tasks.id, workflow_steps.id` of the same rows (the join on the
  step, `heartbeat_seconds IS NOT NULL`): the least a pass can read;
- steady pass: `host.triggers.run_pass()` when every task's current slot has fired (its
  operation id is in `applied_operations`): one anti-join answering "nobody is due", plus the
  empty outbox's read. This is what every worker and serve pays each second;

and, informational, the firing pass: `--fire` tasks whose slot has not fired yet, each
claimed and evaluated (its queue_run), reported per task.

Target: the steady pass within 3x the bare SELECT (it probes the operation ids' primary key
once per row; the ratio is printed). Exits 1 on a FAIL.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from core import ids
from core.services.triggers import heartbeat_operation
from core.store import tables as t
from tests.conftest import open_host
from tests.triggers.boards import heartbeat_board

SLOT = 60
TARGET = 3.0


def _fill(host: Any, count: int, step_id: str, workflow_id: str, workspace_id: str) -> list[str]:
    stamp = ids.now()
    made = [ids.new_id() for _ in range(count)]
    rows = [
        {
            "id": task_id,
            "workspace_id": workspace_id,
            "workflow_id": workflow_id,
            "workflow_step_id": step_id,
            "title": f"bulk {n}",
            "state": "IN_PROGRESS",
            "wip_admitted": True,
            "created_at": stamp,
            "updated_at": stamp,
        }
        for n, task_id in enumerate(made)
    ]
    with host.store.transaction() as uow:
        uow.conn.execute(sa.insert(t.tasks), rows)
    return made


def _mark_fired(host: Any, tasks: list[str], step_id: str, slot: int) -> None:
    stamp = ids.now()
    rows = [
        {
            "operation_id": heartbeat_operation(task_id, step_id, slot),
            "state": "applied",
            "epoch": None,
            "created_at": stamp,
        }
        for task_id in tasks
    ]
    with host.store.transaction() as uow:
        uow.conn.execute(sa.insert(t.applied_operations), rows)


def _bare(host: Any) -> int:
    query = (
        sa.select(t.tasks.c.id, t.workflow_steps.c.id)
        .select_from(
            t.tasks.join(t.workflow_steps, t.workflow_steps.c.id == t.tasks.c.workflow_step_id)
        )
        .where(t.workflow_steps.c.heartbeat_seconds.is_not(None))
    )
    with host.store.read() as conn:
        return len(conn.execute(query).all())


def run(url: str, tasks: int, passes: int, fire: int) -> dict[str, Any]:
    with open_host(url) as host:
        wf, [first] = heartbeat_board(host, SLOT)
        step = wf.step("Watching")
        assert step is not None
        bulk = _fill(host, tasks - 1 - fire, step.id, wf.id, first.workspace_id)
        now = int(time.time())
        slot = now - now % SLOT
        if slot + SLOT - now < 30:  # keep every timed pass inside one slot
            time.sleep(slot + SLOT - now + 1)
            now = int(time.time())
            slot = now - now % SLOT
        _mark_fired(host, [first.id, *bulk], step.id, slot)
        pending = _fill(host, fire, step.id, wf.id, first.workspace_id)
        began = time.perf_counter()
        fired = host.triggers.run_pass(now=now).heartbeats
        fire_s = time.perf_counter() - began
        assert fired == fire, (fired, fire)
        assert _bare(host) == tasks
        bare_s, pass_s = [], []
        for _ in range(passes):
            began = time.perf_counter()
            _bare(host)
            bare_s.append(time.perf_counter() - began)
            began = time.perf_counter()
            report = host.triggers.run_pass(now=now)
            pass_s.append(time.perf_counter() - began)
            assert report.heartbeats == 0, report
        del pending
    bare, steady = statistics.median(bare_s), statistics.median(pass_s)
    return {
        "tasks": tasks,
        "bare_select_ms": round(bare * 1000, 2),
        "steady_pass_ms": round(steady * 1000, 2),
        "ratio": round(steady / bare, 2),
        "fired": fire,
        "firing_ms_per_task": round(fire_s * 1000 / max(fire, 1), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--fire", type=int, default=200)
    parser.add_argument("--pg-url", default=None)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory() as folder:
        urls = [("sqlite", f"sqlite:///{Path(folder) / 'board.db'}")]
        if args.pg_url:
            urls.append(("postgresql", args.pg_url))
        for name, url in urls:
            result = run(url, args.tasks, args.passes, args.fire)
            verdict = "PASS" if result["ratio"] <= TARGET else "FAIL"
            failed |= verdict == "FAIL"
            print(f"{name}: {result} (target ratio <= {TARGET}: {verdict})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
