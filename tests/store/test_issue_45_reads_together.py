"""Issue 45 item 1: a run's reads before its agent starts share one read connection
(`Store.reads_together`), and a write among them ends it: a read after the write sees it, even
on SQLite, where a read transaction keeps the snapshot of its first statement."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.host import Host
from tests.conftest import one_step_workflow


@pytest.mark.one_database  # SQLite's snapshot is what could hide the write; PostgreSQL's reads
# run outside a transaction
def test_issue_45_item_1_reads_together_share_a_connection_and_see_a_write_among_them(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    wf = one_step_workflow(host, tmp_path)
    store = host.store
    task = host.tasks.create(workflow=wf.id, title="before", description="")
    with store.reads_together():
        with store.read() as first:
            assert host.tasks.get(task.id).title == "before"
        with store.read() as second:
            assert second is first  # one connection, one transaction
        host.tasks.update(task.id, title="after")  # a write: the shared read ends
        with store.read() as third:
            assert third is not first
            assert host.tasks.get(task.id).title == "after"
    with store.read() as outside:
        assert outside is not third  # nothing is held past the block
