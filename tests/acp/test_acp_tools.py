"""AGENTS.md "The tool server": an ACP agent (tests/agents/fake_acp_agent.py, a real
subprocess) is handed the `laneway` MCP server in session/new's and session/load's
`mcpServers` through laneway's ACP facade, starts it itself, and acts on the board with it;
on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.agents.protocols.acp import TranscriptItem
from core.agents.tools.broker import ToolBroker, mcp_server
from core.host import Host
from tests.acp.conftest import Start, texts
from tests.tools.board import review_board, reviewer_grant


@pytest.fixture
def broker(host: Host) -> Iterator[ToolBroker]:
    with ToolBroker(host) as made:
        yield made


def _said(items: list[TranscriptItem], tool: str) -> str:
    (line,) = [m for m in texts(items) if m.startswith(f"mcp {tool}")]
    return line


def test_an_acp_agent_decides_and_comments_through_the_server_it_was_handed(
    host: Host, broker: ToolBroker, start: Start, tmp_path: Path
) -> None:
    """session/new carries the `laneway` server; the agent's `decide` records its seat's
    verdict (the quorum of one moves the task) and its `comment` lands by its profile."""
    board = review_board(host)
    grant = reviewer_grant(broker, host, board)
    turn = [
        {"mcp": {"tool": "comment", "args": {"text": "Reviewed: fine."}}},
        {"mcp": {"tool": "decide", "args": {"verdict": "approved", "comment": "ok"}}},
    ]
    agent = start({"turns": [turn]})
    agent.new_session(tmp_path, mcp_servers=[mcp_server(grant)])
    items: list[TranscriptItem] = []
    assert agent.prompt("review it", on_item=items.append).ok
    comment = json.loads(_said(items, "comment").removeprefix("mcp comment: "))
    assert (comment["author"], comment["body"]) == ("r1", "Reviewed: fine.")
    decided = json.loads(_said(items, "decide").removeprefix("mcp decide: "))
    assert (decided["decision"]["decision"], decided["transitioned"]) == ("approved", True)
    assert [(c.author, c.body) for c in host.comments.list(board.task.id)] == [
        ("r1", "Reviewed: fine.")
    ]
    assert host.tasks.get(board.task.id).workflow_step_id == board.step("Approval")


def test_session_load_carries_the_server_too_and_a_revoked_run_is_refused(
    host: Host, broker: ToolBroker, start: Start, tmp_path: Path
) -> None:
    """session/load carries the server again (a new process continuing the conversation);
    once the worker revokes the run's grant, the same server is refused."""
    board = review_board(host)
    grant = reviewer_grant(broker, host, board)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    script = {
        "load_session": True,
        "state_dir": str(state_dir),
        "turns": [[{"mcp": {"tool": "get_task", "args": {}}}]],
    }
    first = start(script)
    session_id = first.new_session(tmp_path, mcp_servers=[mcp_server(grant)]).session_id
    first.close()

    second = start(script)
    assert second.load_session(session_id, tmp_path, mcp_servers=[mcp_server(grant)])
    items: list[TranscriptItem] = []
    assert second.prompt("what is the task?", on_item=items.append).ok
    got = json.loads(_said(items, "get_task").removeprefix("mcp get_task: "))
    assert (got["task"]["id"], got["task"]["step"]["name"]) == (board.task.id, "Review")

    broker.revoke(grant.token)
    items.clear()
    assert second.prompt("again", on_item=items.append).ok
    assert "unknown or was revoked" in _said(items, "get_task error")


def test_without_the_server_the_agent_says_so(start: Start, tmp_path: Path) -> None:
    """The fake agent's mcp step with no `laneway` in mcpServers reports an error line."""
    agent = start({"turns": [[{"mcp": {"tool": "get_task", "args": {}}}]]})
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []
    assert agent.prompt("hi", on_item=items.append).ok
    assert _said(items, "get_task error") == (
        "mcp get_task error: no stdio MCP server named laneway in mcpServers"
    )
