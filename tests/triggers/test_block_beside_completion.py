"""A block and its blocker's arrival at its terminal step, at once (PostgreSQL's READ
COMMITTED: each statement sees what had committed when it began). The block holds the blocker's
row while it writes, so either the arrival committed first (the block sees the blocker finished
and the task waits for nothing), or the arrival waits for the block and then resolves it
(on_blocker_resolved, the task's wait ended). The arrival used to read the task's blockers
before the block committed and resolve nothing, while the block, having read the blocker
unfinished, left the task waiting on a finished task for good."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from core.host import Host
from core.services import blockers
from core.store import tables as t
from tests.conftest import open_host
from tests.interleave import Hold, race


def _asked(host: Host, task: str) -> int:
    return sum(
        r.coalesced_count for r in host.runs.list(task=task) if r.reason == "blockers_resolved"
    )


def test_a_block_beside_its_blockers_completion_is_resolved(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_host(db_url) as host:
        wf = host.workflows.create_from_template("office-default")
        host.profiles.add("worker", command=["agent"])
        host.participants.add(step="Work", role="runner", profile="worker", workflow=wf.id)
        waiting = host.tasks.move(host.tasks.create(workflow=wf.id, title="w").id, "Work").id
        blocker = host.tasks.create(workflow=wf.id, title="b").id

    hold = Hold()
    monkeypatch.setattr(blockers.waits, "begin", hold.after(blockers.waits.begin))

    def block() -> None:
        with open_host(db_url) as host:
            host.blockers.block(waiting, blocker)

    def complete() -> None:
        with open_host(db_url) as host:
            host.tasks.move(blocker, "Done")

    race(hold, block, complete)

    with open_host(db_url) as host:
        host.triggers.drain()
        assert host.tasks.get(blocker).state == "COMPLETED"
        assert [b.id for b in host.blockers.unfinished(waiting)] == []
        with host.store.read() as conn:
            waits = conn.execute(
                sa.select(t.person_waits.c.reason).where(t.person_waits.c.task_id == waiting)
            ).scalars()
            assert "blocked" not in list(waits)
        assert _asked(host, waiting) == 1  # on_blocker_resolved, once
