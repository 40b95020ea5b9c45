"""HTTP.md `GET /api/decisions?task=T&all=true` ("as `decision list`") and
`GET /api/tasks?workflow=W&step=S` with the `task list` filters (issue 22 items 5 and 6),
through a real `laneway serve`; a task in a path named by a suffix or its title."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.serve.conftest import OfficeBoard, Served


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.slow
def test_decisions_route_lists_every_round_with_all_and_the_current_one_without(
    office: OfficeBoard, served: Served
) -> None:
    """A rejected round cleared by a new entry into Review: `all=true` lists it (round 1,
    cleared), the plain route and the task's decisions view do not count it."""
    task = office.task_id
    with served.client() as c:
        ok(c.post(f"/api/tasks/{task}/move", json={"step": "Review"}))
        ok(
            c.post(
                "/api/decisions",
                json={
                    "task": task,
                    "step": "Review",
                    "participant": office.seats["reviewer-1"],
                    "verdict": "rejected",
                    "comment": "needs a test",
                },
            )
        )
        ok(c.post(f"/api/tasks/{task}/move", json={"step": "Review"}))
        every = ok(c.get("/api/decisions", params={"task": task[-8:], "all": "true"}))
        assert [(d["round"], d["cleared"], d["comment"]) for d in every] == [
            (1, True, "needs a test")
        ]
        assert ok(c.get("/api/decisions", params={"task": task, "step": "Review"})) == []
        view = ok(c.get(f"/api/tasks/{task[-8:]}/decisions", params={"step": "Review"}))
        assert view["decisions"] == []
        assert [d["comment"] for d in view["earlier"]] == ["needs a test"]
        missing = c.get("/api/decisions")
        assert missing.status_code == 400
        assert "task" in missing.json()["error"]


@pytest.mark.slow
def test_tasks_route_filters_by_state_and_search_and_names_a_task_by_title(
    office: OfficeBoard, served: Served
) -> None:
    """`task list --state X --search TEXT` as query parameters; `/api/tasks/{t}` by title."""
    with served.client() as c:
        (task,) = ok(c.get("/api/tasks"))
        assert ok(c.get(f"/api/tasks/{task['title']}"))["id"] == office.task_id
        word = task["title"].split()[-1].upper()
        found = ok(c.get("/api/tasks", params={"search": word, "state": task["state"]}))
        assert [t["id"] for t in found] == [office.task_id]
        assert ok(c.get("/api/tasks", params={"search": "no such words"})) == []
        assert c.get("/api/tasks", params={"state": "SLEEPING"}).status_code == 400
