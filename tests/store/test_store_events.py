"""Issue 14, target 2: a transaction's events, inserted at its COMMIT (`core.store.events`).

On PostgreSQL, with no observer in the process, the insert takes the commit-order lock itself
and goes in one round trip with the COMMIT. The events are stored exactly as recorded: in the
order recorded (ids growing in that order), with their task (or none), time and payload - and
not at all if the transaction rolls back.
"""

from __future__ import annotations

import pytest

from core import Host
from core.store import events


class Refused(Exception):
    pass


def test_issue14_a_transactions_events_are_stored_in_the_order_recorded(host: Host) -> None:
    """Issue 14: several events of one transaction (some board-wide, without a task) keep
    their order, task, time and payload; a rolled-back transaction stores none."""
    before = events.read_all(host.store)
    recorded = [
        ("task.created", "t-1", {"n": 1, "text": "a'b\"c"}),
        ("session.state", None, {"n": 2, "nested": {"list": [1, None, "x"]}}),
        ("run.queued", "t-2", {"n": 3}),
        ("task.moved", "t-1", {"n": 4, "unicode": "é✓"}),
    ]
    with host.store.transaction() as uow:
        for type_, task_id, fields in recorded:
            events.record(uow, type_, task_id, **fields)

    def rolled_back() -> None:
        with host.store.transaction() as uow:
            events.record(uow, "task.deleted", "t-9", n=5)
            raise Refused

    with pytest.raises(Refused):
        rolled_back()
    stored = events.read_all(host.store)[len(before) :]
    assert [(e.type, e.task_id, dict(e.data)) for e in stored] == recorded
    assert [e.id for e in stored] == sorted(e.id for e in stored)
    assert len({e.id for e in stored}) == len(stored)
    assert all(e.at for e in stored)
    assert [e.at for e in stored] == sorted(e.at for e in stored)
