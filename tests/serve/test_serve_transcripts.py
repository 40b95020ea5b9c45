"""HTTP.md's transcript routes against a real `laneway serve` process: `GET /api/runs/{r}`
answers as `runs show --json`, `GET /api/sessions/{s}/transcript?after=SEQ&limit=N` the
items in order, and `GET /api/sessions` shows each session's `agent` (AGENTS.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agents.conftest import session_with_run
from tests.conftest import open_host
from tests.serve.conftest import EventReader, Served, laneway, start_serve

pytestmark = pytest.mark.slow


@pytest.fixture
def board(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[Served, dict[str, str]]]:
    with open_host(sqlite_url) as host:
        task, session, run = session_with_run(host, tmp_path, profile="coder")
        host.sessions.append_items(
            session,
            [("prompt", "go", {}), ("tool_call", "read a.py", {"kind": "read"})],
            run_id=run,
        )
        host.sessions.append_items(session, [("log", "later", {})])
        host.runs.record_usage(run, {"output_tokens": 9})
        host.sessions.record_agent(session, acp_session_id="acp-1", mode="code")
    served = start_serve(sqlite_url, tmp_path)
    try:
        yield served, {"db": sqlite_url, "task": task, "session": session, "run": run}
    finally:
        served.stop()


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def test_run_and_transcript_routes_answer_the_cli_shapes(
    board: tuple[Served, dict[str, str]],
) -> None:
    """HTTP.md: `GET /api/runs/{r}` as `runs show --json`; the transcript paged by after and
    limit; names by id or unique suffix (CLI.md)."""
    served, ids = board
    with served.client() as client:
        shown = ok(client.get(f"/api/runs/{ids['run'][-8:]}"))
        assert shown == laneway(ids["db"], "runs", "show", ids["run"])
        assert shown["run"]["usage"] == {"cost_usd": 0.0, "input_tokens": 0, "output_tokens": 9}
        assert [i["kind"] for i in shown["items"]] == ["prompt", "tool_call"]

        every = ok(client.get(f"/api/sessions/{ids['session']}/transcript"))
        assert every == laneway(ids["db"], "session", "log", ids["session"])
        assert [i["seq"] for i in every] == [1, 2, 3]
        assert every[1]["data"] == {"kind": "read"}
        page = ok(client.get(f"/api/sessions/{ids['session'][-6:]}/transcript?after=1&limit=1"))
        assert [i["seq"] for i in page] == [2]

        sessions = ok(client.get(f"/api/sessions?task={ids['task']}"))
        assert sessions == laneway(ids["db"], "session", "list", "--task", ids["task"])
        assert sessions[0]["agent"]["acp_session_id"] == "acp-1"
        assert sessions[0]["agent"]["protocol"] == "acp"


def test_transcript_route_mistakes_are_400_and_404(board: tuple[Served, dict[str, str]]) -> None:
    """HTTP.md errors: bad input 400 naming the field, an unknown run or session 404."""
    served, ids = board
    with served.client() as client:
        bad = client.get(f"/api/sessions/{ids['session']}/transcript?after=x")
        assert bad.status_code == 400
        assert "after" in bad.json()["error"]
        too_many = client.get(f"/api/sessions/{ids['session']}/transcript?limit=0")
        assert too_many.status_code == 400
        assert "limit" in too_many.json()["error"]
        assert client.get("/api/runs/zzzzzzzz").status_code == 404
        assert client.get("/api/sessions/zzzzzzzz/transcript").status_code == 404


def test_a_kept_item_reaches_the_event_stream_live(
    board: tuple[Served, dict[str, str]],
) -> None:
    """HTTP.md events: `agent.item` (session_id, run_id, seq, kind, text) whichever process
    kept the item: here another process, while the stream is open."""
    served, ids = board
    reader = EventReader(served, task=ids["task"])
    try:
        with open_host(ids["db"]) as host:
            host.sessions.append_items(
                ids["session"], [("message", "live!", {})], run_id=ids["run"]
            )
        got = reader.wait_for(lambda es: any(e.data.get("seq") == 4 for e in es))
    finally:
        reader.close()
    (item,) = [e for e in got if e.type == "agent.item" and e.data["seq"] == 4]
    assert item.data["task_id"] == ids["task"]
    assert (item.data["session_id"], item.data["run_id"]) == (ids["session"], ids["run"])
    assert (item.data["kind"], item.data["text"]) == ("message", "live!")
