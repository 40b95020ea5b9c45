"""The queue's side of stop and retry, on both databases (issue 22 "Stop and retry").

CLI.md `runs cancel R` / `runs retry R` and "A run's status gains `cancelled`": a queued run is
cancelled by one conditional UPDATE whose row count decides, so a claim racing a cancel never
leaves a run both started and cancelled; a claimed run only gets a request; retry refuses what
is not failed, dead or cancelled; a cancel-requested run whose worker died is not run again.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.agents import worker
from core.errors import Conflict
from core.host import Host
from core.store import tables as t
from tests.agents.conftest import enqueue, plain_workflow, run_rows, set_run, sleeper, stamp
from tests.conftest import open_host

EV = t.board_events


def _board(host: Host, tmp_path: Path) -> tuple[str, str]:
    workflow = plain_workflow(host, tmp_path)
    task = host.tasks.create(workflow=workflow, title="T").id
    agent = host.profiles.add("agent", command=sleeper(0), max_concurrent_sessions=1000).id
    return task, agent


def test_a_queued_run_is_cancelled_at_once_and_never_claimed(db_url: str, tmp_path: Path) -> None:
    """`runs cancel` of a queued run: `cancelled` (reason `user`) at once, a `run.cancelled`
    event; no worker claims it; cancelling it again names its state."""
    with open_host(db_url) as host:
        task, agent = _board(host, tmp_path)
        run_id = enqueue(host, agent, task)
        cancelled = host.runs.cancel(run_id)
        assert (cancelled.status, cancelled.cancel_reason) == ("cancelled", "user")
        assert cancelled.finished_at is not None
        assert worker.claim_next(host) is None
        with pytest.raises(Conflict, match=f"run {run_id} is cancelled: only a queued or running"):
            host.runs.cancel(run_id)
        with host.store.read() as conn:
            found = conn.execute(sa.select(EV.c.data).where(EV.c.type == "run.cancelled")).scalars()
            assert [json.loads(d)["run_id"] for d in found] == [run_id]


def test_a_claim_racing_cancels_never_both_starts_and_cancels_a_run(
    db_url: str, tmp_path: Path
) -> None:
    """One conditional statement decides each: every run ends either claimed or cancelled,
    and a run the cancel ended at once was never claimed."""
    with open_host(db_url) as host:
        task, agent = _board(host, tmp_path)
        run_ids = [enqueue(host, agent, task) for _ in range(40)]
    claimed: list[str] = []
    ended: list[str] = []
    go = threading.Barrier(2)

    def claim() -> None:
        with open_host(db_url) as h:
            go.wait()
            while (run := worker.claim_next(h)) is not None:
                claimed.append(run.id)

    def cancel() -> None:
        with open_host(db_url) as h:
            go.wait()
            for run_id in run_ids:
                if h.runs.cancel(run_id).status == "cancelled":
                    ended.append(run_id)

    threads = [threading.Thread(target=claim), threading.Thread(target=cancel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not set(claimed) & set(ended)
    assert sorted(claimed + ended) == sorted(run_ids)
    rows = {r["id"]: r for r in run_rows(db_url)}
    for run_id in claimed:  # asked to stop while claimed: a request for its worker
        assert (rows[run_id]["status"], rows[run_id]["cancel_reason"]) == ("claimed", "user")
    for run_id in ended:
        assert rows[run_id]["status"] == "cancelled"


def test_retry_refuses_a_run_that_is_not_failed_dead_or_cancelled(
    db_url: str, tmp_path: Path
) -> None:
    """`runs retry` of a queued, claimed or finished run is a one-line error naming its state;
    of a dead run it queues a new run naming the old one."""
    with open_host(db_url) as host:
        task, agent = _board(host, tmp_path)
        runs: dict[str, Any] = {}
        for status in ("queued", "claimed", "finished", "dead"):
            runs[status] = enqueue(host, agent, task)
            if status != "queued":
                set_run(host, runs[status], status=status, claimed_epoch=host.epoch)
        for status in ("queued", "claimed", "finished"):
            with pytest.raises(Conflict) as refused:
                host.runs.retry(runs[status])
            assert str(refused.value) == (
                f"run {runs[status]} is {status}: only a failed, dead or cancelled run can be "
                "retried"
            )
        again = host.runs.retry(runs["dead"])
        assert (again.status, again.retry_of, again.attempts) == ("queued", runs["dead"], 0)
        assert host.runs.get(runs["dead"]).status == "dead"  # type: ignore[union-attr]


def test_a_cancel_requested_run_whose_worker_died_is_cancelled_not_requeued(
    db_url: str, tmp_path: Path
) -> None:
    """A claimed run asked to stop, left behind by a dead worker, ends `cancelled` when the
    next worker looks (it is not started again)."""
    with open_host(db_url) as host:
        task, agent = _board(host, tmp_path)
        run_id = enqueue(host, agent, task)
        set_run(host, run_id, status="claimed", claimed_at=stamp(0), claimed_epoch="dead")
        assert host.runs.cancel(run_id).status == "claimed"  # a request, for its worker
        found = worker.requeue_orphans(host)
        assert found.requeued == ()
        run = host.runs.get(run_id)
        assert run is not None
        assert (run.status, run.cancel_reason) == ("cancelled", "user")
        with host.store.read() as conn:
            count = conn.execute(
                sa.select(t.agent_profiles.c.claimed_runs).where(t.agent_profiles.c.id == agent)
            ).scalar()
        assert count == 0
