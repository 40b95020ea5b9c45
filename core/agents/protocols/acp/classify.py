"""How a turn ends (AGENTS.md "How a turn ends (ACP)"): stop reasons and errors to routes."""

from __future__ import annotations

import json
import re
from typing import Any, Final

from acp import RequestError

from core.agents.protocols.acp.transport import last_lines
from core.agents.values import TokenUsage, TurnEnd

AUTH_CODE: Final = -32000
_AUTH_CODES: Final = frozenset({401, 403})
_BUSY_CODES: Final = frozenset({429, 503, 529})
# OpenCode answers a model API's 401 with -32603 and only the API's message ("Incorrect API
# key provided"), no status: its words for a key the API refused say authentication too.
_AUTH_STATUS = re.compile(
    r"\b(401|403)\b|unauthori[sz]ed|(invalid|incorrect|missing) (x-)?api[ _-]?key",
    re.IGNORECASE,
)
# Codex (codex-acp, ACP v1) reports a model API error other than 401 as its turn's closing
# message, then ends the turn `end_turn`: "exceeded retry limit, last status: 429 Too Many
# Requests" or "unexpected status 503 Service Unavailable: ..., url: ...". Only a closing
# message that is nothing but such a line counts.
_CODEX_BUSY = re.compile(
    r"\A\s*(exceeded retry limit, last status: (429|503|529)\b[^\n]*"
    r"|unexpected status (429|503|529)\b[^\n]*, url: \S+)\s*\Z"
)
_BUSY = re.compile(r"\b(429|503|529)\b|rate[ _-]?limit|overloaded|too many requests", re.IGNORECASE)
_RETRY_TEXT = re.compile(
    r"(?:retry|try again)\s*(?:after|in)?\s*:?\s*(\d+(?:\.\d+)?)\s*"
    r"(ms|milliseconds?|s|sec|seconds?)?",
    re.IGNORECASE,
)
_RETRY_KEYS: Final = {
    "retryAfter": 1.0,
    "retry_after": 1.0,
    "retryAfterSeconds": 1.0,
    "retry_after_seconds": 1.0,
    "retryAfterMs": 0.001,
    "retry_after_ms": 0.001,
}


def stop_reason_end(stop_reason: str, *, cancelled: bool, usage: TokenUsage | None) -> TurnEnd:
    """The route of a `session/prompt` answer."""
    if stop_reason == "end_turn":
        return TurnEnd("ok", stop_reason=stop_reason, usage=usage)
    if stop_reason in ("max_tokens", "max_turn_requests"):
        return TurnEnd(
            "ok",
            stop_reason=stop_reason,
            usage=usage,
            warning=f"the agent ended its turn early: {stop_reason}",
        )
    if stop_reason == "refusal":
        return TurnEnd("failed", "agent refused", route="R1", stop_reason=stop_reason, usage=usage)
    if stop_reason == "cancelled" and cancelled:
        return TurnEnd("cancelled", "the turn was cancelled", stop_reason=stop_reason, usage=usage)
    return TurnEnd(
        "failed",
        f"the agent ended its turn with {stop_reason!r} unasked",
        route="R1",
        stop_reason=stop_reason,
        usage=usage,
    )


def closing_message_end(end: TurnEnd, closing: str) -> TurnEnd:
    """A turn that ended `end_turn` whose closing message is Codex's report of a busy model
    API is transient (AGENTS.md: an error that says the provider is busy), not the turn's end."""
    if end.outcome != "ok" or end.stop_reason != "end_turn" or not _CODEX_BUSY.match(closing):
        return end
    message = closing.strip()
    return TurnEnd(
        "transient",
        f"the provider is busy: {message}",
        route="R4",
        retry_after=retry_delay(None, message),
        stop_reason=end.stop_reason,
        usage=end.usage,
    )


def agent_message(exc: RequestError) -> str:
    """The agent's own words: the error's message, and its data's details when they add some."""
    text = str(exc)
    data = exc.data
    extra: Any = None
    if isinstance(data, dict):
        extra = data.get("message") or data.get("details") or data.get("error")
    elif isinstance(data, str):
        extra = data
    if isinstance(extra, str) and extra and extra not in text:
        text = f"{text}: {extra}" if text else extra
    return text


def error_end(exc: RequestError, *, stderr_tail: str = "") -> TurnEnd:
    """The route of a JSON-RPC error the agent answered with."""
    message = agent_message(exc)
    haystack = message + " " + _data_text(exc.data)
    # Gemini CLI answers a failed model request with the API's HTTP status as the JSON-RPC
    # error code (401, 429, 503, ...) and only the API's message, which names no status.
    status = exc.code if 400 <= exc.code < 600 else None
    if exc.code == AUTH_CODE or status in _AUTH_CODES or _AUTH_STATUS.search(haystack):
        return TurnEnd("failed", f"authentication failed: {message}", route="R3")
    if status in _BUSY_CODES or _BUSY.search(haystack):
        return TurnEnd(
            "transient",
            f"the provider is busy: {message}",
            route="R4",
            retry_after=retry_delay(exc.data, haystack),
        )
    return failed(f"agent error {exc.code}: {message}", stderr_tail)


def failed(message: str, stderr_tail: str = "") -> TurnEnd:
    """A terminal failure (R1). With what the agent wrote on stderr, its last lines end the
    message (the run's error) and the kept tail goes to the transcript."""
    if stderr_tail:
        message = f"{message}; its last stderr lines: {last_lines(stderr_tail)}"
    return TurnEnd("failed", message, route="R1", stderr_tail=stderr_tail)


def retry_delay(data: Any, text: str) -> float | None:
    """The retry delay, in seconds, an error names in its data or its text."""
    if isinstance(data, dict):
        for key, scale in _RETRY_KEYS.items():
            value = data.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                return float(value) * scale
    match = _RETRY_TEXT.search(text)
    if match is None:
        return None
    value = float(match.group(1))
    unit = (match.group(2) or "s").lower()
    return value / 1000 if unit.startswith("m") else value


def _data_text(data: Any) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    try:
        return json.dumps(data)[:4000]
    except (TypeError, ValueError):
        return ""
