"""HTTP.md `GET /api/tasks/{t}/comments` / `POST /api/tasks/{t}/comments` (`{"body",
"author"?}`): as `task comments` / `task comment`, `[comment]` / 201 comment; the board's
event stream carries `comment.added` with `comment_id`."""

from __future__ import annotations

import pytest

from tests.serve.conftest import EventReader, OfficeBoard, Served, laneway
from tests.serve.test_serve_api import error, ok


@pytest.mark.slow
def test_comments_over_http_answer_the_cli_shapes(served: Served, office: OfficeBoard) -> None:
    reader = EventReader(served, task=office.task_id)
    try:
        with served.client() as c:
            path = f"/api/tasks/{office.task_id}/comments"
            assert ok(c.get(path)) == []
            made = ok(c.post(path, json={"body": "From the page."}), 201)
            assert (made["task_id"], made["author"], made["body"]) == (
                office.task_id,
                "user",
                "From the page.",
            )
            by = ok(c.post(path, json={"body": "Me.", "author": "alice"}), 201)
            assert by["author"] == "alice"
            assert ok(c.get(path)) == laneway(office.db, "task", "comments", office.task_id)
            assert [x["id"] for x in ok(c.get(path))] == [made["id"], by["id"]]
            assert "body" in error(c.post(path, json={}), 400)
            error(c.get("/api/tasks/nope/comments"), 404)
        seen = reader.wait_for(lambda events: [e for e in events if e.type == "comment.added"][1:])
        added = [e.data["comment_id"] for e in seen if e.type == "comment.added"]
        assert added == [made["id"], by["id"]]
    finally:
        reader.close()
