"""The `laneway_event` observer hook (issue 12 item 5): committed events, after COMMIT, in
commit order; a rollback delivers nothing; one raising observer never stops the others and is
named in a structured record; no plugin implementing the hook costs nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from loguru import logger

from core import Host
from core.plugin.selection import PluginSelection
from core.store import events
from core.store.events import Event
from plugins import hookimpl


@attrs.define
class Watcher:
    seen: list[Event] = attrs.field(factory=list)
    in_transaction: list[bool] = attrs.field(factory=list)
    host: Host | None = None

    @hookimpl
    def laneway_event(self, event: Event) -> None:
        self.seen.append(event)
        if self.host is not None:
            self.in_transaction.append(self.host.store.in_transaction)


class Raising:
    @hookimpl
    def laneway_event(self, event: Event) -> None:
        raise RuntimeError(f"observer broke on {event.type}")


def _open(url: str, **plugins: object) -> Host:
    selection = PluginSelection(
        allow=frozenset({"kanban", "office", *plugins}), extra=tuple(plugins.items())
    )
    return Host.open(url, plugins=selection)


@pytest.fixture
def records() -> Iterator[list[dict[str, Any]]]:
    found: list[dict[str, Any]] = []
    handler = logger.add(lambda m: found.append(dict(m.record["extra"])), level="ERROR")
    logger.enable("core")
    try:
        yield found
    finally:
        logger.remove(handler)


def _walk(host: Host) -> str:
    workflow = host.workflows.create_from_template("simple")
    task = host.tasks.create(workflow=workflow.id, title="observed")
    step = next(s for s in host.workflows.by_id(workflow.id).steps if s.id != task.workflow_step_id)
    host.tasks.move(task.id, step.name)
    return task.id


def test_observer_gets_committed_events_in_commit_order_with_their_ids(db_url: str) -> None:
    """AC item 5: every stored event of this process, with its stored id, in id order, each
    delivered after its transaction committed (outside it)."""
    watcher = Watcher()
    with _open(db_url, watcher=watcher) as host:
        watcher.host = host
        task_id = _walk(host)
        stored = events.read_all(host.store)
    assert [(e.id, e.type, e.task_id, dict(e.data)) for e in watcher.seen] == [
        (e.id, e.type, e.task_id, dict(e.data)) for e in stored
    ]
    assert [e.type for e in watcher.seen if e.task_id == task_id][:2] == [
        "task.created",
        "task.moved",
    ]
    assert watcher.in_transaction
    assert not any(watcher.in_transaction)


def test_a_rolled_back_change_delivers_nothing(db_url: str) -> None:
    watcher = Watcher()
    with _open(db_url, watcher=watcher) as host:

        def rolled_back() -> None:
            with host.store.transaction() as uow:
                events.record(uow, "task.archived", None, workflow_id="w")
                raise RuntimeError("roll back")

        with pytest.raises(RuntimeError):
            rolled_back()
        with host.store.transaction() as uow:
            events.record(uow, "task.archived", None, workflow_id="kept")
    assert [(e.type, e.data["workflow_id"]) for e in watcher.seen] == [("task.archived", "kept")]


def test_a_raising_observer_is_named_and_never_stops_the_others(
    sqlite_url: str, records: list[dict[str, Any]]
) -> None:
    """AC item 5 / item 4 for this hook: the other observer still gets every event, the
    change commits, and the failure is one structured record naming the plugin."""
    watcher = Watcher()
    with _open(sqlite_url, broken=Raising(), watcher=watcher) as host:
        task_id = _walk(host)
        assert host.tasks.get(task_id).workflow_step_id is not None
        stored = events.read_all(host.store)
    assert [e.id for e in watcher.seen] == [e.id for e in stored]
    failed = [r for r in records if r.get("hook") == "laneway_event"]
    assert len(failed) == len(stored)
    assert {r["plugin"] for r in failed} == {"broken"}
    assert failed[0]["event_type"] == stored[0].type
    assert "observer broke" in failed[0]["cause"]


def test_an_observer_may_write_and_sees_its_own_events_after(sqlite_url: str) -> None:
    seen: list[str] = []

    @attrs.define
    class Writer:
        host: Host | None = None

        @hookimpl
        def laneway_event(self, event: Event) -> None:
            seen.append(event.type)
            if event.type == "task.created" and self.host is not None:
                with self.host.store.transaction() as uow:
                    events.record(uow, "task.archived", event.task_id, workflow_id="echo")

    writer = Writer()
    with _open(sqlite_url, writer=writer) as host:
        writer.host = host
        workflow = host.workflows.create_from_template("simple")
        host.tasks.create(workflow=workflow.id, title="echoed")
    assert seen == ["task.created", "task.archived"]


def test_no_implementation_means_no_delivery_work(sqlite_url: str) -> None:
    """The add-on cost: with no plugin implementing the hook the store never queues events
    (and inserts them without RETURNING)."""
    with _open(sqlite_url) as host:
        observer = host.store.observer
        assert observer is not None
        assert not observer.wanted()
        queued: list[Event] = []
        committed = observer.committed

        def spy(batch: Any) -> None:
            queued.extend(batch)
            committed(batch)

        observer.committed = spy  # type: ignore[method-assign]
        _walk(host)
        assert events.read_all(host.store)
    assert queued == []


def test_agent_output_reaches_observers_and_is_never_stored(sqlite_url: str) -> None:
    watcher = Watcher()
    with _open(sqlite_url, watcher=watcher) as host:
        events.notify(host.store, "agent.output", None, run_id="r", text="hello")
        assert events.read_all(host.store) == []
    (said,) = watcher.seen
    assert (said.id, said.type, said.data["text"]) == (0, "agent.output", "hello")
