"""Issue 42 item 2 (the permission reason only): a task that starts waiting for a person
writes `task.needs_person` (`reason`: permission) in the request's transaction, and
`task.needs_person_ended` when the request is answered or cancelled; a hook can take just
those."""

from __future__ import annotations

from pathlib import Path

from core import Host
from core.services import hooks
from core.store import events
from tests.agents.conftest import session_with_run

OPTIONS = [
    {"option_id": "yes", "name": "Allow", "kind": "allow_once"},
    {"option_id": "no", "name": "Reject", "kind": "reject_once"},
]


def _person_events(host: Host) -> list[tuple[str, str | None, str, str]]:
    return [
        (e.type, e.task_id, e.data["reason"], e.data["permission_id"])
        for e in events.read_all(host.store)
        if e.type.startswith("task.needs_person")
    ]


def test_issue_42_item_2_needs_person_on_a_permission_request_and_its_end(
    host: Host, tmp_path: Path
) -> None:
    hook = hooks.add(host.store, "http://127.0.0.1:9/x", ("task.needs_person",), None)
    task, session, run = session_with_run(host, tmp_path, title="edit")
    first = host.permissions.request(task, session, run_id=run, tool_call={}, options=OPTIONS)
    second = host.permissions.request(task, session, run_id=run, tool_call={}, options=OPTIONS)
    host.permissions.answer(first.id, True)
    host.permissions.cancel_pending(run_id=run, by="run_ended")
    assert _person_events(host) == [
        ("task.needs_person", task, "permission", first.id),
        ("task.needs_person", task, "permission", second.id),
        ("task.needs_person_ended", task, "permission", first.id),
        ("task.needs_person_ended", task, "permission", second.id),
    ]
    assert hooks.take(host.store) == 2
    taken = hooks.deliveries(host.store, hook_id=hook.id)
    assert [d.type for d in taken] == ["task.needs_person", "task.needs_person"]
