"""Issue 41 item 2: how the Codex and OpenCode adapters surface a model API's errors over ACP,
and the route laneway gives each (AGENTS.md "How a turn ends (ACP)"). The words are the
adapters' own, as tests/agents/test_issue_41_real_codex.py and ..._real_opencode.py saw them
from the real adapters; those tests prove the whole path."""

from __future__ import annotations

import pytest
from acp import RequestError

from core.agents.protocols.acp.classify import closing_message_end, error_end
from core.agents.values import TurnEnd

ENDED = TurnEnd("ok", stop_reason="end_turn")


def test_issue_41_item_2_opencodes_401_is_r3() -> None:
    """OpenCode answers session/prompt -32603 with only the API's message and its error's name,
    no status: an API key the model API refused is authentication (R3), not R1."""
    exc = RequestError(
        -32603,
        "Internal error: Incorrect API key provided: sk-stan***din.",
        {"service": "session", "errorName": "APIError"},
    )
    end = error_end(exc)
    assert (end.outcome, end.route) == ("failed", "R3")
    assert "Incorrect API key provided" in end.message


def test_issue_41_item_2_opencodes_other_api_errors_stay_r1() -> None:
    exc = RequestError(-32603, "Internal error: model not found", {"errorName": "APIError"})
    assert error_end(exc).route == "R1"


@pytest.mark.parametrize(
    "closing",
    [
        "exceeded retry limit, last status: 429 Too Many Requests\n\n",
        (
            "unexpected status 503 Service Unavailable: Service unavailable, "
            "url: http://127.0.0.1:41234/v1/responses\n\n"
        ),
        (
            "unexpected status 529 <unknown status code>: Overloaded, "
            "url: http://127.0.0.1:41234/v1/responses\n\n"
        ),
    ],
    ids=["429", "503", "529"],
)
def test_issue_41_item_2_codexs_busy_model_api_is_transient(closing: str) -> None:
    """codex-acp (ACP v1) reports a model API's 429/503/529 as the turn's closing message and
    answers `end_turn`: that turn is transient (R4), not a turn that ended."""
    end = closing_message_end(ENDED, closing)
    assert (end.outcome, end.route) == ("transient", "R4")
    assert end.message == f"the provider is busy: {closing.strip()}"


@pytest.mark.parametrize(
    "closing",
    [
        "Done: the handler now answers 429 when the client exceeds its rate limit.",
        "The log said: exceeded retry limit, last status: 429 Too Many Requests",
        "unexpected status 400 Bad Request: bad, url: http://127.0.0.1:1/v1/responses",
    ],
)
def test_issue_41_item_2_a_closing_message_that_only_mentions_a_status_ends_the_turn(
    closing: str,
) -> None:
    assert closing_message_end(ENDED, closing) is ENDED


def test_issue_41_item_2_a_busy_closing_message_of_a_cancelled_turn_stays_cancelled() -> None:
    cancelled = TurnEnd("cancelled", "the turn was cancelled", stop_reason="cancelled")
    closing = "exceeded retry limit, last status: 429 Too Many Requests"
    assert closing_message_end(cancelled, closing) is cancelled
