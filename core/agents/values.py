"""The agent wing's values: what a protocol hands its caller (transcript items, a turn's end,
usage, permission requests) and what a turn hands the worker. All frozen, none holding a live
object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from core.model import ItemKind as ItemKind  # noqa: PLC0414 - the ACP values name it too
from core.model import TranscriptItem as TranscriptItem  # noqa: PLC0414 - the wing's value

Outcome = Literal["ok", "cancelled", "failed", "transient"]
PermissionMode = Literal["ask", "allow", "deny"]


@attrs.frozen
class Mode:
    id: str
    name: str


@attrs.frozen
class ConfigOption:
    """A session config option the agent offers; `values` is empty for a boolean option."""

    id: str
    name: str
    type: str
    current: str | bool
    values: tuple[str, ...] = ()
    category: str | None = None


@attrs.frozen
class SessionState:
    """What the agent reported about its session: what AGENTS.md's `agent` shows."""

    session_id: str
    modes: tuple[Mode, ...] = ()
    mode: str | None = None
    config_options: tuple[ConfigOption, ...] = ()
    models: tuple[str, ...] = ()
    model: str | None = None

    @property
    def mode_ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.modes)


LOAD_LOSES: Final = frozenset({"gemini-cli"})
"""Agents (by `agentInfo.name`) whose `session/load` in a new process mostly loses the
conversation it loads: Gemini CLI 0.61 records the session afresh in its file before reading
it, then finds nothing to resume. Restarting one between runs would cost its conversation, so
its live process is kept, as for an agent that cannot load (load stays the way back after a
crash)."""


@attrs.frozen
class AgentInfo:
    """What `initialize` answered."""

    protocol_version: int
    name: str | None
    version: str | None
    load_session: bool
    auth_methods: tuple[str, ...]
    resume_session: bool = False
    """It offers `session/resume` (`sessionCapabilities.resume`): a conversation continues
    without its history replayed."""
    close_session: bool = False
    """It offers `session/close` (`sessionCapabilities.close`)."""

    @property
    def continues(self) -> bool:
        """It can take up a stored conversation in a new process (resume or load)."""
        return self.resume_session or (self.load_session and self.name not in LOAD_LOSES)


@attrs.frozen
class Change:
    """The answer to a mode or model request; `applied` is False when the agent lacks it."""

    applied: bool
    current: str | None
    offered: tuple[str, ...]


@attrs.frozen
class TokenUsage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    context_used: int | None = None
    context_size: int | None = None
    cost: float | None = None
    currency: str | None = None


@attrs.frozen
class TurnEnd:
    """How a turn (or a step before it) ended, routed as AGENTS.md "How a turn ends (ACP)".

    `route` is R1 (terminal), R2 (cannot start), R3 (authentication) for `failed`, R4 for
    `transient`, None otherwise; `retry_after` is the delay a busy provider named, in seconds.
    """

    outcome: Outcome
    message: str = ""
    route: str | None = None
    stop_reason: str | None = None
    warning: str | None = None
    retry_after: float | None = None
    usage: TokenUsage | None = None
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@attrs.frozen
class PermissionOption:
    option_id: str
    name: str
    kind: str


@attrs.frozen
class PermissionRequest:
    """An agent's `session/request_permission`, as the caller's `ask` callback sees it."""

    session_id: str
    tool_call: Mapping[str, Any]
    options: tuple[PermissionOption, ...]

    @property
    def tool_kind(self) -> str | None:
        kind = self.tool_call.get("kind")
        return kind if isinstance(kind, str) else None


@attrs.frozen
class ElicitationRequest:
    """An agent's `elicitation/create` in form mode, as the caller's callback sees it: the
    message and the form as a question's fields (`core.services.questions`)."""

    session_id: str
    message: str
    fields: tuple[Mapping[str, Any], ...]


@attrs.frozen
class ElicitationAnswer:
    """What the agent is told: `accept` with the values given, `decline` or `cancel`."""

    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] | None = None


@attrs.frozen
class PermissionPolicy:
    """A profile's `--permissions` and `--auto-allow` (AGENTS.md "Profiles")."""

    mode: PermissionMode = "ask"
    auto_allow: frozenset[str] = frozenset()
    unseen: frozenset[str] = frozenset()
    """Files in the agent's room its sandbox covers (the board's database, its lock files):
    the client's `fs/*` refuses them as the sandbox does (`Room.masked`)."""


class AcpError(Exception):
    """A step of the conversation (start, initialize, session/new, ...) failed; `end` routes it."""

    def __init__(self, end: TurnEnd) -> None:
        super().__init__(end.message)
        self.end = end


@attrs.frozen
class TurnOutcome:
    """How a launched turn ended, for the caller (the worker finishing a run)."""

    session_id: str
    ok: bool
    error: str | None = None
    route: str | None = None
    cancelled: bool = False
    """laneway stopped the turn (`session/cancel`); no on_agent_error ran."""
    stopped: str | None = None
    """Why it was stopped (one of `core.agents.stops.STOPS`) when `cancelled`."""
    messages_waiting: bool = True
    """False when the turn's end saw no message queued for the session, in the transaction
    that set it waiting for input: a message sent after that commit finds it waiting and
    queues a run of its own (`SessionService.send`), so there is nothing to deliver here."""
