"""Issue 25 item 6 through the API, on both databases: `PATCH /api/tasks/{t}` edits a title or
a description, `POST /api/tasks/{t}/unarchive` undoes an archive, each with its event
(`task.updated`, `task.unarchived`; docs/serve.md). The app in process over a real database."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from core.host import Host
from core.serve.app import build_app
from core.store import events
from office_plugin import demo

TOKEN = "task-edit-token-0123456789abc"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_patch_edits_and_unarchive_restores_with_events(host: Host, tmp_path: Path) -> None:
    """PATCH answers the task with its new title/description; an empty title or an empty body
    is a one-line 400; unarchive answers the task back at its step; archiving twice or
    unarchiving a task on the board is a 400; the events carry the fields the page needs."""
    built = demo.build_board(host, tmp_path / "agents")
    task = host.tasks.get(built.task_id)
    with TestClient(build_app(host, token=TOKEN), raise_server_exceptions=False) as client:
        url = f"/api/tasks/{task.id}"
        edited = client.patch(
            url, json={"title": "Edited", "description": "new words"}, headers=AUTH
        )
        assert edited.status_code == 200, edited.text
        assert (edited.json()["title"], edited.json()["description"]) == ("Edited", "new words")
        only = client.patch(url, json={"description": "only this"}, headers=AUTH).json()
        assert (only["title"], only["description"]) == ("Edited", "only this")

        empty = client.patch(url, json={"title": " "}, headers=AUTH)
        assert empty.status_code == 400
        assert empty.json()["error"] == f"task {task.id} title: must not be empty"
        nothing = client.patch(url, json={}, headers=AUTH)
        assert nothing.status_code == 400
        assert nothing.json()["error"] == "body: give 'title' or 'description'"
        wrong = client.patch(url, json={"title": 3}, headers=AUTH)
        assert wrong.status_code == 400
        assert client.patch(url, json={"title": "x"}).status_code == 401

        assert client.post(f"{url}/archive", headers=AUTH).json()["archived_at"] is not None
        back = client.post(f"{url}/unarchive", headers=AUTH)
        assert back.status_code == 200, back.text
        assert back.json()["archived_at"] is None
        assert back.json()["workflow_step_id"] == task.workflow_step_id
        again = client.post(f"{url}/unarchive", headers=AUTH)
        assert again.status_code == 400
        assert again.json()["error"] == f"task {task.id} is not archived"

    seen = [e for e in events.read_all(host.store, task_id=task.id) if e.type != "entry.marker"]
    updated = [e.data["fields"] for e in seen if e.type == "task.updated"]
    assert updated == [["description", "title"], ["description"]]
    restored = [e for e in seen if e.type == "task.unarchived"]
    assert len(restored) == 1
    assert restored[0].data["workflow_id"] == task.workflow_id
    assert restored[0].data["step_id"] == task.workflow_step_id
    kinds = [e.type for e in seen]
    assert kinds.index("task.archived") < kinds.index("task.unarchived")
