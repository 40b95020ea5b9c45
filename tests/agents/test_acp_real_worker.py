"""The real ACP adapters behind a card, through a real `laneway worker` (issue 29, "The real
adapters", moved to today's by issue 41 item 1): `@agentclientprotocol/claude-agent-acp` and
`@agentclientprotocol/codex-acp` from npm, with no credentials and no network
(`unshare -n`: an empty network namespace). Found as tests/acp/test_real_adapters.py finds them;
`.ci/run` installs them and makes their absence a failure.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.acp.test_real_adapters import adapter
from tests.agents.conftest import run_rows
from tests.agents.test_acp_worker import Board, warnings

pytestmark = pytest.mark.slow


def test_issue_41_item_1_claude_agent_acp_takes_the_steps_mode_and_fails_r3_without_credentials(
    db_url: str, tmp_path: Path
) -> None:
    """claude-agent-acp initialises, opens a session, reports its modes (among them `plan`),
    takes the mode the step asks for, and its turn fails as R3 with the agent's
    "Authentication required", in bounded time, with on_agent_error run."""
    home = tmp_path / "home"
    home.mkdir()
    board = Board(
        db_url,
        tmp_path,
        {},
        on_enter=[{"type": "set_session_mode", "config": {"mode": "plan"}}],
        command=["unshare", "-n", adapter("claude-agent-acp")],
        permissions="deny",
    )
    began = time.monotonic()
    board.work(env={"HOME": str(home), "LANEWAY_RETRY_DELAYS": "0.1"})
    assert time.monotonic() - began < 120
    step, session, items = board.read()
    assert "plan" in session.agent["modes"]
    assert session.agent["mode"] == "plan"
    assert not [w for w in warnings(items) if "plan" in w]
    error = session.metadata["last_agent_error"]
    assert error["route"] == "R3"
    assert "Authentication required" in error["message"]
    assert step == "Trouble"  # on_agent_error ran
    assert [r["status"] for r in run_rows(db_url)] == ["failed"]
    print(f"claude-agent-acp said: {error['message']!r}; modes {session.agent['modes']}")


def test_issue_41_item_1_codex_acp_refuses_at_session_new_as_r3_without_credentials(
    db_url: str, tmp_path: Path
) -> None:
    """codex-acp refuses earlier (at session/new): R3 with its own message, on_agent_error run."""
    home = tmp_path / "home"
    home.mkdir()
    board = Board(
        db_url, tmp_path, {}, command=["unshare", "-n", adapter("codex-acp")], permissions="deny"
    )
    began = time.monotonic()
    board.work(env={"HOME": str(home), "CODEX_HOME": str(home), "LANEWAY_RETRY_DELAYS": "0.1"})
    assert time.monotonic() - began < 120
    step, session, _items = board.read()
    error = session.metadata["last_agent_error"]
    assert error["route"] == "R3"
    assert "auth" in error["message"].lower()
    assert step == "Trouble"
    print(f"codex-acp said: {error['message']!r}")
