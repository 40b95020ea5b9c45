"""Issue 27 item 1: a worker that lost its liveness lock is fenced, and the fence reaches the
agent.

Every write a run's outcome makes (its finish, a decision, a step signal, a transcript item) is
conditional on the run's claim epoch: once the run was re-queued and re-claimed elsewhere, the
cut-off process's writes are refused, each with one WARNING. The worker watches its own lock (the
PostgreSQL lock connection's socket, the SQLite lock file's inode) and stops its running agents
the moment it is lost. The lock is taken away as the issue's reproducers did: the lock
connection terminated (`pg_terminate_backend`), the SQLite lock file deleted. Both tests fail on
the main this branch started from (its cut-off worker finished the run and recorded the
verdict; its agent ran on).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import Host
from core.agents import worker
from core.agents.values import TurnOutcome
from core.errors import RunFenced
from core.runs import RunRequest
from core.store import liveness
from core.store import tables as t
from tests.conftest import eventually, open_host
from tests.on_enter.conftest import build_office, raw

WAIT_S = 30.0


def take_lock_away(host: Host) -> str:
    """Make `host`'s liveness lock go as a fault would: its lock file deleted (SQLite), its lock
    connection's backend terminated (PostgreSQL). The epoch it had."""
    epoch = host.epoch
    assert epoch is not None
    if host.store.is_sqlite:
        directory = liveness.epochs_dir(host.store.url)
        assert directory is not None
        os.unlink(directory / f"{epoch}.lock")
        return epoch
    key = liveness.pg_key(epoch)
    with raw(host.store.url.render_as_string(hide_password=False)) as conn:
        pids = conn.execute(
            sa.text(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid::bigint = :hi AND objid::bigint = :lo"
            ),
            {"hi": key >> 32, "lo": key & 0xFFFFFFFF},
        ).scalars()
        for pid in list(pids):
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    return epoch


def _until(probe: Any, what: str) -> Any:
    return eventually(probe, timeout=WAIT_S, what=what, every=0.05)


def _warnings(logs: list[dict[str, Any]], run_id: str) -> list[str]:
    return [
        r["message"] for r in logs if r["level"] == "WARNING" and r["extra"].get("run_id") == run_id
    ]


def test_item1_a_cut_off_processes_late_writes_are_refused(
    db_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """Item 1: host A claims a reviewer run; A's lock goes; host B finds A's epoch dead and
    claims the run again. A's verdict, transcript item and finish are each refused (one
    WARNING each); the run stays B's, and B's verdict is the one recorded."""
    office = build_office(db_url, reviewers=1)
    with open_host(db_url) as a, open_host(db_url) as b:
        a.tasks.move(office.task, "Review")
        run = worker.claim_next(a)
        assert run is not None
        session = a.sessions.start(office.task, profile=office.reviewers[0], external=False)
        take_lock_away(a)
        requeued = worker.requeue_orphans(b)
        assert [r.id for r in requeued.requeued] == [run.id]
        again = worker.claim_next(b)
        assert again is not None
        assert again.id == run.id

        with pytest.raises(RunFenced) as verdict:
            a.decisions.record_for_agent(
                office.task, office.review, office.reviewers[0], "rejected", run_id=run.id
            )
        assert verdict.value.reason == "claim_lost"
        with pytest.raises(RunFenced):
            a.sessions.append_items(session.id, [("log", "late", {})], run_id=run.id)
        assert a.runtime.fenced(run.id) == "claim_lost"
        worker.finish(a, run, TurnOutcome(session.id, ok=True))

        kept = b.decisions.record_for_agent(
            office.task, office.review, office.reviewers[0], "approved", run_id=run.id
        )
        assert kept["recorded"] is True
        worker.finish(b, again, TurnOutcome(session.id, ok=True))
        assert a.live_epoch() != run.claimed_epoch  # A carries on under a new epoch

    with raw(db_url) as conn:
        (row,) = conn.execute(sa.select(t.runs).where(t.runs.c.id == run.id)).mappings()
        verdicts = conn.execute(
            sa.select(t.workflow_step_decisions.c.decision).where(
                t.workflow_step_decisions.c.task_id == office.task
            )
        ).scalars()
        items = conn.execute(
            sa.select(t.transcript_items.c.text).where(t.transcript_items.c.run_id == run.id)
        ).scalars()
        assert (row["status"], row["claimed_epoch"]) == ("finished", again.claimed_epoch)
        assert list(verdicts) == ["approved"]
        assert "late" not in list(items)
    assert len(_warnings(laneway_logs, run.id)) >= 2  # the finish's and the requeue's


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_item1_a_worker_stops_its_agent_the_moment_its_lock_is_lost(
    db_url: str, tmp_path: Path, laneway_logs: list[dict[str, Any]]
) -> None:
    """Item 1: host A's worker runs a long turn; A's lock is taken away: A's watcher stops the
    agent at once (its process is gone before the turn could end), gives the run up with one
    WARNING and writes nothing of it; host B then takes the run and finishes it. The run was
    started twice and finished once; never did two of its agents run at once."""
    pids = tmp_path / "pids"
    # Each execution notes its pid; a later one also notes whether the first still lives
    # (`overlap`), and does not nap.
    code = (
        "import os, sys, time\n"
        "sys.stdin.read()\n"
        f"p = {str(pids)!r}\n"
        "earlier = open(p).read().split() if os.path.exists(p) else []\n"
        "def alive(pid):\n"
        "    try:\n"
        "        return open(f'/proc/{pid}/stat').read().split()[2] != 'Z'\n"
        "    except OSError:\n"
        "        return False\n"
        "note = 'overlap' if earlier and alive(earlier[0]) else ''\n"
        "open(p, 'a').write(f'{os.getpid()} {note}\\n')\n"
        "time.sleep(0 if earlier else 60)\n"
    )
    with open_host(db_url) as a, open_host(db_url) as b:
        wf = a.workflows.create_from_template("simple")
        agent = a.profiles.add("long", command=[sys.executable, "-c", code]).id
        task = a.tasks.create(workflow=wf.id, title="t").id
        run = a.runs.enqueue(
            RunRequest(agent, task, a.tasks.get(task).workflow_step_id, "t", coalesce_exempt=True)
        ).run_id
        working = threading.Thread(target=worker.work, args=(a,), kwargs={"once": True})
        working.start()
        first = int(_until(lambda: pids.exists() and pids.read_text().split(), "the agent")[0])
        lost_at = time.monotonic()
        take_lock_away(a)
        working.join(WAIT_S)
        assert not working.is_alive()
        stopped_in = time.monotonic() - lost_at
        assert not _alive(first)
        assert stopped_in < 30  # the watcher's poll and the agent's kill, not the 60 s nap

        # A (under its new epoch, finding its old one dead) or B takes the run again
        worker.work(b, once=True)
    with raw(db_url) as conn:
        (row,) = conn.execute(sa.select(t.runs).where(t.runs.c.id == run)).mappings()
    assert row["status"] == "finished"
    lines = pids.read_text().splitlines()
    assert len(lines) == 2
    assert "overlap" not in pids.read_text()
    given_up = [m for m in _warnings(laneway_logs, run) if m.startswith("run given up")]
    assert len(given_up) == 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False
