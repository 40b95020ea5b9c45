"""Issue 27 item 4: a stale round's run no longer counts ("newer entries win", for runs as for
markers).

A reviewer run queued by an older Review entry that is still queued when the task left Review and
came back is cancelled (`cancel_reason` `superseded`) when a worker claims it, its agent never
launched; one already running when its entry was superseded has its verdict refused and ends
`cancelled` (`superseded`), so it cannot decide the new round. Each test fails on the main this
branch started from (runs carried no entry, and the old round's verdict counted).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.agents import worker
from core.agents.values import TurnOutcome
from core.errors import RunFenced
from core.store import tables as t
from tests.conftest import open_host
from tests.on_enter.conftest import build_office, raw

R = t.runs
E = t.step_entries


def _runs(url: str, task: str) -> list[dict[str, Any]]:
    with raw(url) as conn:
        found = conn.execute(sa.select(R).where(R.c.task_id == task).order_by(R.c.requested_at))
        return [dict(r) for r in found.mappings()]


def _approver(tmp_path: Path) -> list[str]:
    """An exec agent that approves and notes that it ran."""
    mark = tmp_path / "ran.log"
    code = (
        "import os, sys\n"
        "sys.stdin.read()\n"
        f"open({str(mark)!r}, 'a').write(os.environ['LANEWAY_RUN_ID'] + '\\n')\n"
        'print(\'{"decision": "approved"}\', flush=True)\n'
    )
    return [sys.executable, "-c", code]


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_item4_runs_carry_their_entry_and_a_stale_rounds_run_is_cancelled_at_claim(
    db_url: str, tmp_path: Path
) -> None:
    """Item 4: Review -> Work -> Review with the first round's reviewer runs still queued: the
    worker cancels those as `superseded` without launching their agents and runs the new
    round's; each run names the entry that queued it."""
    office = build_office(db_url, reviewers=2)
    with open_host(db_url) as host:
        for profile in office.reviewers:
            host.profiles.set(profile, command=_approver(tmp_path))
        host.tasks.move(office.task, "Review")
        host.tasks.move(office.task, "Work")
        host.tasks.move(office.task, "Review")
        with raw(db_url) as conn:
            entries = conn.execute(
                sa.select(E.c.id, E.c.entry_seq)
                .where(E.c.task_id == office.task, E.c.step_id == office.review)
                .order_by(E.c.entry_seq)
            ).all()
        first, second = (e.id for e in entries)
        queued = _runs(db_url, office.task)
        assert sorted(r["entry_id"] for r in queued) == sorted([first, first, second, second])

        worker.work(host, once=True)

    ended = {r["id"]: r for r in _runs(db_url, office.task)}
    stale = [r for r in ended.values() if r["entry_id"] == first]
    assert [(r["status"], r["cancel_reason"]) for r in stale] == [("cancelled", "superseded")] * 2
    ran = (tmp_path / "ran.log").read_text().split()
    assert sorted(ran) == sorted(r["id"] for r in ended.values() if r["entry_id"] == second)


def test_item4_a_superseded_runs_verdict_is_refused_and_the_run_ends_cancelled(
    db_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """Item 4: a run claimed in round one whose task leaves Review and comes back while its
    agent works: its verdict is refused (RunFenced, `superseded`), the new round has no
    decision from it, and its finish ends it `cancelled` (`superseded`), not `finished`."""
    office = build_office(db_url, reviewers=1)
    with open_host(db_url) as host:
        host.tasks.move(office.task, "Review")
        claimed = worker.claim_next(host)
        assert claimed is not None
        assert claimed.entry_id is not None
        host.tasks.move(office.task, "Work")
        host.tasks.move(office.task, "Review")

        with pytest.raises(RunFenced) as refused:
            host.decisions.record_for_agent(
                office.task, office.review, office.reviewers[0], "approved", run_id=claimed.id
            )
        assert refused.value.reason == "superseded"
        assert host.decisions.list(office.task, office.review) == []
        assert host.tasks.get(office.task).workflow_step_id == office.review

        worker.finish(host, claimed, TurnOutcome("s", ok=True))
    (old,) = [r for r in _runs(db_url, office.task) if r["id"] == claimed.id]
    assert (old["status"], old["cancel_reason"]) == ("cancelled", "superseded")
