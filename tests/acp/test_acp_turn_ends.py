"""AGENTS.md "How a turn ends (ACP)", row by row, against the fake agent as a subprocess."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from core.agents.protocols.acp import AcpError, TranscriptItem, shared_loop
from tests.acp.conftest import Start, fake_env, texts


def turn(start: Start, tmp_path: Path, steps: list[dict[str, Any]], **script: Any) -> Any:
    agent = start({"turns": [steps], **script})
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []
    return agent.prompt("work", on_item=items.append), items


def test_end_turn_is_the_turn_ended(start: Start, tmp_path: Path) -> None:
    """Row "session/prompt answers end_turn": the turn ended, as exit status 0."""
    end, items = turn(start, tmp_path, [{"message": "all done"}])
    assert end.ok
    assert end.stop_reason == "end_turn"
    assert end.warning is None
    assert [i.kind for i in items][:1] == ["prompt"]
    assert texts(items) == ["echo: work (previous: None)all done"]


@pytest.mark.parametrize("reason", ["max_tokens", "max_turn_requests"])
def test_max_tokens_and_turn_requests_end_the_turn_with_a_warning(
    start: Start, tmp_path: Path, reason: str
) -> None:
    """Row "end_turn (max_tokens and max_turn_requests too, with a WARNING)"."""
    end, _ = turn(start, tmp_path, [{"stop": reason}])
    assert end.ok
    assert end.stop_reason == reason
    assert end.warning is not None
    assert reason in end.warning


def test_refusal_is_terminal_agent_refused(start: Start, tmp_path: Path) -> None:
    """Row "answers refusal": terminal failure (R1), message `agent refused`."""
    end, _ = turn(start, tmp_path, [{"stop": "refusal"}])
    assert (end.outcome, end.route, end.message) == ("failed", "R1", "agent refused")


def test_cancelled_after_laneway_cancelled_is_cancelled(start: Start, tmp_path: Path) -> None:
    """Row "answers cancelled after laneway cancelled": the run ends cancelled."""
    agent = start({"turns": [[{"wait_cancel": True}]]})
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []

    def cancel_when_running(i: TranscriptItem) -> None:
        items.append(i)
        if i.kind == "message":
            agent.cancel()

    end = agent.prompt("work", on_item=cancel_when_running)
    assert (end.outcome, end.stop_reason, end.route) == ("cancelled", "cancelled", None)


def test_cancelled_unasked_is_terminal(start: Start, tmp_path: Path) -> None:
    """Row "any other error": `cancelled` laneway did not ask for is no cancellation (R1)."""
    end, _ = turn(start, tmp_path, [{"stop": "cancelled"}])
    assert (end.outcome, end.route) == ("failed", "R1")


def test_cancel_the_agent_ignores_kills_its_group(start: Start, tmp_path: Path) -> None:
    """AGENTS.md: cancel is `session/cancel`, then the process group is killed after the
    grace; the turn still ends cancelled, in bounded time."""
    agent = start({"turns": [[{"sleep": 60}]]})
    agent.new_session(tmp_path)
    began = time.monotonic()

    def cancel_soon(i: TranscriptItem) -> None:
        if i.kind == "message":
            agent.cancel(grace=0.5)

    end = agent.prompt("work", on_item=cancel_soon)
    assert end.outcome == "cancelled"
    assert time.monotonic() - began < 30
    assert not agent.alive


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_auth_error_at_initialize_is_r3_with_the_agents_message() -> None:
    """Row "an error that says authentication is needed (JSON-RPC -32000) at initialize"."""
    with pytest.raises(AcpError) as caught:
        shared_loop().start_agent(
            [sys.executable, str(Path(__file__).parents[1] / "agents" / "fake_acp_agent.py")],
            env=fake_env({"init": "auth_error"}),
        )
    end = caught.value.end
    assert (end.outcome, end.route) == ("failed", "R3")
    assert "Authentication required" in end.message
    assert "run `fake login` first" in end.message


def test_http_401_in_the_data_at_session_new_is_r3(start: Start, tmp_path: Path) -> None:
    """Row "authentication ... an HTTP 401/403 in the error's data" at session/new."""
    agent = start({"new": "auth_error"})
    with pytest.raises(AcpError) as caught:
        agent.new_session(tmp_path)
    assert caught.value.end.route == "R3"
    assert "401 Unauthorized" in caught.value.end.message


def test_auth_error_at_session_load_is_r3(start: Start, tmp_path: Path) -> None:
    """Row "authentication ... at session/load"."""
    agent = start({"load_session": True, "load": "auth_error"})
    with pytest.raises(AcpError) as caught:
        agent.load_session("old", tmp_path)
    assert caught.value.end.route == "R3"
    assert "session expired: log in again" in caught.value.end.message


def test_auth_error_at_prompt_is_r3(start: Start, tmp_path: Path) -> None:
    """Row "authentication ... at session/prompt" (-32000)."""
    end, _ = turn(
        start, tmp_path, [{"error": {"code": -32000, "message": "Authentication required"}}]
    )
    assert (end.outcome, end.route, end.message) == (
        "failed",
        "R3",
        "authentication failed: Authentication required",
    )


def test_a_403_in_the_text_is_r3(start: Start, tmp_path: Path) -> None:
    """Row "an HTTP 401/403 in the error's ... text"."""
    end, _ = turn(
        start, tmp_path, [{"error": {"code": -32603, "message": "API error: 403 Forbidden"}}]
    )
    assert end.route == "R3"


def test_rate_limit_is_transient_with_the_delay_the_data_names(
    start: Start, tmp_path: Path
) -> None:
    """Row "the provider is busy (rate limit ...)": transient, its retry delay honoured."""
    error = {"code": -32603, "message": "rate limit exceeded", "data": {"retryAfter": 7}}
    end, _ = turn(start, tmp_path, [{"error": error}])
    assert (end.outcome, end.route, end.retry_after) == ("transient", "R4", 7.0)


@pytest.mark.parametrize(
    ("message", "delay"),
    [
        ("upstream 529: overloaded, retry after 2 s", 2.0),
        ("HTTP 429 Too Many Requests; try again in 1500 ms", 1.5),
        ("503 Service Unavailable", None),
    ],
)
def test_busy_provider_in_the_text_is_transient(
    start: Start, tmp_path: Path, message: str, delay: float | None
) -> None:
    """Row "the provider is busy (overloaded, HTTP 429/503/529)": the text's delay honoured."""
    end, _ = turn(start, tmp_path, [{"error": {"code": -32603, "message": message}}])
    assert (end.outcome, end.route, end.retry_after) == ("transient", "R4", delay)


@pytest.mark.parametrize(
    ("code", "route"), [(401, "R3"), (403, "R3"), (429, "R4"), (503, "R4"), (529, "R4")]
)
def test_issue_41_item_2_an_http_status_as_the_error_code_routes_as_the_status(
    start: Start, tmp_path: Path, code: int, route: str
) -> None:
    """Gemini CLI's form (issue 41 item 2): the model API's HTTP status is the JSON-RPC error
    code and the message is only the API's words, naming no status: 401/403 are R3, 429, 503
    and 529 transient."""
    end, _ = turn(start, tmp_path, [{"error": {"code": code, "message": "the API's words"}}])
    assert end.route == route
    assert "the API's words" in end.message


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_command_that_cannot_start_is_r2(tmp_path: Path) -> None:
    """Row "the process cannot be started": R2."""
    with pytest.raises(AcpError) as caught:
        shared_loop().start_agent([str(tmp_path / "no-such-agent")], env={})
    end = caught.value.end
    assert (end.outcome, end.route) == ("failed", "R2")
    assert "no-such-agent" in end.message


def test_exit_mid_turn_is_r1_with_the_last_stderr_line(start: Start, tmp_path: Path) -> None:
    """Row "the process exits ... mid-turn": R1 with the agent's message and last stderr line."""
    end, _ = turn(start, tmp_path, [{"stderr": "fatal: model crashed"}, {"exit": 9}])
    assert (end.outcome, end.route) == ("failed", "R1")
    assert "exit status 9" in end.message
    assert "fatal: model crashed" in end.message


def test_stdout_closed_mid_turn_is_r1(start: Start, tmp_path: Path) -> None:
    """Row "the process ... closes its stdout mid-turn": R1, in bounded time."""
    began = time.monotonic()
    end, _ = turn(start, tmp_path, [{"stderr": "closing up"}, {"close_stdout": True}])
    assert (end.outcome, end.route) == ("failed", "R1")
    assert "closed its stdout during session/prompt" in end.message
    assert "closing up" in end.message
    assert time.monotonic() - began < 30


def test_any_other_error_is_r1_with_the_agents_message(start: Start, tmp_path: Path) -> None:
    """Row "any other error": R1 with the agent's message."""
    error = {"code": -32603, "message": "Internal error", "data": {"details": "disk on fire"}}
    end, _ = turn(start, tmp_path, [{"error": error}])
    assert (end.outcome, end.route) == ("failed", "R1")
    assert "disk on fire" in end.message


def test_usage_and_cost_are_kept(start: Start, tmp_path: Path) -> None:
    """Issue 29 "Usage and cost the agent reports are kept per run": on the turn's end (the
    run's `usage`); issue 41 item 8: not as a blank `usage` row of the transcript."""
    end, items = turn(start, tmp_path, [{"usage": {"used": 120, "size": 1000, "cost": 0.25}}])
    assert end.usage is not None
    assert (end.usage.context_used, end.usage.cost, end.usage.currency) == (120, 0.25, "USD")
    assert [i for i in items if i.kind == "usage"] == []


def test_issue_41_item_8_a_transcript_a_person_can_read(start: Start, tmp_path: Path) -> None:
    """Issue 41 item 8: no empty items (usage goes on the run), and tool calls titled with
    paths relative to the working directory."""
    steps: list[dict[str, Any]] = [
        {"tool_call": {"id": "t1", "title": f"Edit {tmp_path}/src/a.py", "kind": "edit"}},
        {"usage": {"used": 120, "size": 1000, "cost": 0.25}},
        {"tool_update": {"id": "t1", "status": "completed"}},
        {"message": "done"},
    ]
    end, items = turn(start, tmp_path, steps)
    assert end.ok
    assert [i for i in items if not i.text.strip()] == []
    assert [i.text for i in items if i.kind == "tool_call"] == [
        "Edit src/a.py pending",
        "completed",
    ]
    assert end.usage is not None
