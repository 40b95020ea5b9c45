"""`Host.subscribe`: committed board events delivered after commit, as the `laneway_event`
hook is (house issue item 3: the demo observes through it, not by registering into a live
bundle's plugin manager)."""

from __future__ import annotations

from core.store.events import Event
from plugins.testing.logs import LogRecord
from tests.conftest import open_host


def test_a_subscription_gets_events_in_commit_order_and_a_raising_one_is_isolated(
    db_url: str, laneway_logs: list[LogRecord]
) -> None:
    with open_host(db_url) as host:
        wf = host.workflows.create_from_template("office-default")
        seen: list[Event] = []

        def raising(_event: Event) -> None:
            raise RuntimeError("boom")

        stop_raising = host.subscribe(raising)
        stop = host.subscribe(seen.append)
        assert host.store.observer is not None
        assert host.store.observer.wanted()
        first = host.tasks.create(workflow=wf.id, title="one")
        second = host.tasks.create(workflow=wf.id, title="two")
        ids = [e.id for e in seen]
        assert ids == sorted(ids)
        assert len(ids) >= 2
        assert next(e.task_id for e in seen if e.task_id in {first.id, second.id}) == first.id
        errors = [r for r in laneway_logs if r["level"] == "ERROR" and r["extra"].get("hook")]
        assert errors
        assert errors[0]["extra"]["cause"] == "RuntimeError: boom"
        stop()
        stop_raising()
        count = len(seen)
        host.tasks.create(workflow=wf.id, title="three")
        assert len(seen) == count
