"""Issue 42 item 1 over HTTP: the hook endpoints answer as the `hook` commands do (never a
secret), and a writable `laneway serve` delivers the events its own API made."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest

from tests.conftest import eventually
from tests.hooks.receiver import receiver
from tests.serve.conftest import laneway, start_serve

pytestmark = pytest.mark.slow


def test_issue_42_item_1_http_hooks_and_a_serve_that_delivers(db_url: str, tmp_path: Path) -> None:
    laneway(db_url, "init")
    laneway(db_url, "workflow", "create", "--template", "simple")
    served = start_serve(db_url, tmp_path, env={"LANEWAY_HOOK_RETRY_BASE": "0.2"})
    try:
        with receiver() as rec, served.client() as c:
            made = c.post(
                "/api/hooks",
                json={"url": rec.url, "events": ["task.created"], "secret": "http-secret"},
            )
            assert made.status_code == 201, made.text
            hook = made.json()
            assert set(hook) == {"id", "url", "events", "created_at"}
            assert "http-secret" not in c.get("/api/hooks").text
            assert c.post("/api/hooks", json={"url": "ftp://x"}).status_code == 400
            assert (
                c.post("/api/hooks", json={"url": rec.url, "events": ["nope"]}).status_code == 400
            )
            task = c.post("/api/tasks", json={"workflow": "Kanban", "title": "t"}).json()
            eventually(lambda: rec.got, timeout=60, what="serve delivered")
            [got] = rec.got
            assert json.loads(got.body)["task_id"] == task["id"]
            mac = hmac.new(b"http-secret", got.body, hashlib.sha256).hexdigest()
            assert got.headers["x-laneway-signature"] == f"sha256={mac}"
            delivered = eventually(
                lambda: c.get("/api/hooks/deliveries", params={"state": "delivered"}).json(),
                timeout=30,
                what="recorded as delivered",
            )
            assert [d["hook_id"] for d in delivered] == [hook["id"]]
            assert c.get("/api/hooks/deliveries", params={"state": "odd"}).status_code == 400
            assert c.delete(f"/api/hooks/{hook['id']}").json()["id"] == hook["id"]
            assert c.get("/api/hooks").json() == []
            assert c.delete(f"/api/hooks/{hook['id']}").status_code == 404
    finally:
        served.stop()


def test_issue_42_item_4_http_schedules_and_a_serve_that_makes_their_tasks(
    db_url: str, tmp_path: Path
) -> None:
    """The schedule endpoints answer as the `schedule` commands do, bad `every` values are a
    400 naming the field, and a writable serve (which runs the scheduler) makes the tasks."""
    laneway(db_url, "init")
    laneway(db_url, "workflow", "create", "--template", "simple")
    served = start_serve(db_url, tmp_path)
    try:
        with served.client() as c:
            add = {"workflow": "Kanban", "title": "tick"}
            for every in (0, -5, "inf", "nan", 10**30, True, None, 1.5):
                refused = c.post("/api/schedules", json={**add, "every": every})
                assert refused.status_code == 400, (every, refused.text)
                assert "every" in refused.json()["error"]
            made = c.post("/api/schedules", json={**add, "every": 1})
            assert made.status_code == 201, made.text
            schedule = made.json()
            assert [s["id"] for s in c.get("/api/schedules").json()] == [schedule["id"]]
            eventually(
                lambda: [x for x in c.get("/api/tasks").json() if x["title"] == "tick"],
                timeout=30,
                what="serve made a scheduled task",
            )
            assert c.delete(f"/api/schedules/{schedule['id']}").json() == {
                "removed": schedule["id"]
            }
            assert c.get("/api/schedules").json() == []
            assert c.delete(f"/api/schedules/{schedule['id']}").status_code == 404
    finally:
        served.stop()
