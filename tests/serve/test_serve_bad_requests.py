"""Every bad request a JSON 4xx, the same on SQLite and PostgreSQL, and never a traceback
(issue 28, HTTP.md Conventions: "Never a traceback, never a 500 for a user mistake"). The app
in process over a real database; the log read through a list sink."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from core.host import Host
from core.logs import logger
from core.serve.app import build_app
from core.serve.http import MAX_DEPTH
from office_plugin import demo

TOKEN = "bad-requests-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def records() -> Iterator[list[dict[str, Any]]]:
    found: list[dict[str, Any]] = []

    def keep(message: Any) -> None:
        record = message.record
        found.append(
            {
                "level": record["level"].name,
                "message": record["message"],
                "exception": record["exception"],
                **record["extra"],
            }
        )

    handler = logger.add(keep, level="DEBUG")
    logger.enable("core")
    try:
        yield found
    finally:
        logger.remove(handler)


def _error(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error", "code"}, body
    return str(body["error"])


def test_bad_requests_are_json_4xx_with_the_same_wording_on_both_databases(
    host: Host, tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    """Issue 28 item 3: deep JSON, a Last-Event-ID past 2^63, NUL in an id (path, query and
    body), two Authorization headers: each a one-line JSON 4xx whose wording is pinned here,
    so SQLite and PostgreSQL say the same; nothing logged at ERROR, no traceback."""
    built = demo.build_board(host, tmp_path / "agents")
    task = built.task_id
    with TestClient(build_app(host, token=TOKEN), raise_server_exceptions=False) as client:
        deep = b"[" * 100_000 + b"]" * 100_000
        said = _error(client.post(f"/api/tasks/{task}/move", content=deep, headers=AUTH), 400)
        assert said == f"body: JSON nested deeper than {MAX_DEPTH} levels"
        fairly_deep = b'{"step": ' + b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1) + b"}"
        said = _error(
            client.post(f"/api/tasks/{task}/move", content=fairly_deep, headers=AUTH), 400
        )
        assert said == f"body: JSON nested deeper than {MAX_DEPTH} levels"

        for last in (str(2**63), str(2**64 + 5), "9" * 5000):
            said = _error(client.get("/api/events", headers={**AUTH, "Last-Event-ID": last}), 400)
            assert said.startswith("Last-Event-ID: "), said
        said = _error(client.get("/api/events", headers={**AUTH, "Last-Event-ID": str(2**63)}), 400)
        assert said == f"Last-Event-ID: must be at most {2**63 - 1}"

        assert _error(client.get(f"/api/tasks/{task[:6]}%00x", headers=AUTH), 400) == (
            "path 't': must not contain NUL characters"
        )
        assert _error(client.get("/api/tasks", params={"step": "a\x00b"}, headers=AUTH), 400) == (
            "query 'step': must not contain NUL characters"
        )
        assert _error(client.get("/api/events", params={"task": "x\x00"}, headers=AUTH), 400) == (
            "query 'task': must not contain NUL characters"
        )
        created = client.post(
            "/api/tasks",
            json={"workflow": built.workflow.id, "title": "nul\x00title"},
            headers=AUTH,
        )
        assert _error(created, 400) == "body: text must not contain NUL characters"

        twice = [("Authorization", AUTH["Authorization"]), ("Authorization", "Bearer other-one")]
        assert _error(client.get("/api/info", headers=twice), 400) == (
            "Authorization: 2 headers; send one"
        )
        same_twice = [("Authorization", AUTH["Authorization"])] * 2
        assert _error(client.get("/api/info", headers=same_twice), 400) == (
            "Authorization: 2 headers; send one"
        )
        assert client.get("/api/info", headers=AUTH).status_code == 200
    assert not [r for r in records if r["level"] in ("ERROR", "CRITICAL") or r["exception"]]


def test_a_client_that_disconnects_mid_body_is_a_debug_record_not_a_traceback(
    host: Host, tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    """Issue 28 item 3: each client that went away mid-body logged a traceback; now one DEBUG
    record each, and the route never ran (the task did not move)."""
    built = demo.build_board(host, tmp_path / "agents")
    app = build_app(host, token=TOKEN)
    before = host.tasks.get(built.task_id).workflow_step_id

    async def one_client() -> list[MutableMapping[str, Any]]:
        incoming: list[dict[str, Any]] = [
            {"type": "http.request", "body": b'{"step": "Wo', "more_body": True},
            {"type": "http.disconnect"},
        ]
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return incoming.pop(0) if incoming else {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": f"/api/tasks/{built.task_id}/move",
            "raw_path": f"/api/tasks/{built.task_id}/move".encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"authorization", AUTH["Authorization"].encode()),
                (b"content-type", b"application/json"),
                (b"content-length", b"40"),
            ],
            "client": ("127.0.0.1", 5555),
            "server": ("127.0.0.1", 8765),
        }
        await app(scope, receive, send)
        return sent

    async def many() -> None:
        await asyncio.gather(*(one_client() for _ in range(20)))

    asyncio.run(many())
    gone = [r for r in records if r["message"] == "client went away mid-body"]
    assert len(gone) == 20
    assert {r["level"] for r in gone} == {"DEBUG"}
    assert not [r for r in records if r["level"] in ("ERROR", "CRITICAL") or r["exception"]]
    assert host.tasks.get(built.task_id).workflow_step_id == before
