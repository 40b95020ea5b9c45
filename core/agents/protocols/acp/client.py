"""laneway's side of ACP: what it answers an agent's requests and notifications with.

Everything here runs on the ACP event-loop thread and never waits for the database: items and
permission questions are *posted* to the caller (`post`, thread-safe and non-blocking), who
handles them on its own thread. A question posted carries an asyncio future that the caller
resolves from its thread through the loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
from acp import RequestError
from acp.schema import (
    AcceptElicitationResponse,
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    CancelElicitationResponse,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    DeclineElicitationResponse,
    DeniedOutcome,
    ElicitationBooleanPropertySchema,
    ElicitationFormRequestMode,
    ElicitationFormSessionMode,
    ElicitationIntegerPropertySchema,
    ElicitationNumberPropertySchema,
    ElicitationStringPropertySchema,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    WriteTextFileResponse,
)
from acp.schema import (
    PermissionOption as AcpPermissionOption,
)

from core.agents.protocols.acp import confined
from core.agents.protocols.acp.items import MAX_TEXT, block_text, dump, item, update_item
from core.agents.tools.wire import SERVER_NAME, TOOLS
from core.agents.values import (
    ElicitationAnswer,
    ElicitationRequest,
    ItemKind,
    PermissionOption,
    PermissionPolicy,
    PermissionRequest,
    TokenUsage,
    TranscriptItem,
)

ANNOUNCED: Final = 64
"""How many of the tool calls an agent announced a client remembers, for the permission
requests that name one only by its id."""
_FILLED: Final = ("title", "kind", "rawInput", "_meta")
MAX_READ: Final = 8 * 1024 * 1024
"""The largest file `fs/read_text_file` returns (bytes): the answer is one stdin line."""
CHUNK_QUIET: Final = 0.2
"""Message text gathered from chunks the agent did not mark with a `messageId` is one item once
the agent has paused this long (s): nothing else says where such a message ends."""
REPLAY_QUIET: Final = 0.2
"""Seconds without an update that end a session/load's replay (see `replay_done`)."""
REPLAY_LIMIT: Final = 3.0
"""The longest laneway waits for a replay to end after session/load has answered."""
ALLOW_KINDS: Final = ("allow_once", "allow_always")
REJECT_KINDS: Final = ("reject_once", "reject_always")


@attrs.frozen
class Ask:
    """A permission question for the caller; its answer (an option id, or None) sets `answer`."""

    request: PermissionRequest
    answer: asyncio.Future[str | None]


@attrs.frozen
class Elicit:
    """An agent's form question for the caller; its answer sets `answer`."""

    request: ElicitationRequest
    answer: asyncio.Future[ElicitationAnswer]


Post = Callable[[TranscriptItem | Ask | Elicit], None]

_FIELD_TYPES: Final = (
    (ElicitationStringPropertySchema, "string"),
    (ElicitationNumberPropertySchema, "number"),
    (ElicitationIntegerPropertySchema, "integer"),
    (ElicitationBooleanPropertySchema, "boolean"),
)


def form_fields(schema: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """A form's properties as a question's fields (name, type, title, required, choices),
    and the names of those laneway cannot ask (multi-select, or a type it does not know)."""
    required = set(schema.required or ())
    fields: list[dict[str, Any]] = []
    unknown: list[str] = []
    for name, prop in (schema.properties or {}).items():
        kind = next((k for cls, k in _FIELD_TYPES if isinstance(prop, cls)), None)
        if kind is None:
            unknown.append(name)
            continue
        choices: list[Any] = []
        if isinstance(prop, ElicitationStringPropertySchema):
            choices = list(prop.enum or ()) or [o.const for o in prop.one_of or ()]
        fields.append(
            {
                "name": name,
                "type": kind,
                "title": prop.title or prop.description or "",
                "required": name in required,
                "choices": choices,
            }
        )
    return fields, unknown


def pick(options: tuple[PermissionOption, ...], kinds: tuple[str, ...]) -> str | None:
    return next((o.option_id for o in options if o.kind in kinds), None)


# How the adapters name a tool of an MCP server in a tool call: Claude Code
# `mcp__laneway__comment` (title or `_meta.claudeCode.toolName`), Codex `mcp.laneway.comment`,
# OpenCode `laneway_comment`, Gemini CLI `comment (laneway MCP Server)` (its title; the model
# calls it `mcp_laneway_comment`).
_LANEWAY_NAMES: Final = frozenset(
    [
        *(
            f"{prefix}{tool}"
            for tool in TOOLS
            for prefix in (
                f"mcp__{SERVER_NAME}__",
                f"mcp.{SERVER_NAME}.",
                f"{SERVER_NAME}_",
                f"mcp_{SERVER_NAME}_",
            )
        ),
        *(f"{tool} ({SERVER_NAME} MCP Server)" for tool in TOOLS),
    ]
)


def laneway_tool(tool_call: Mapping[str, Any]) -> bool:
    """Whether a permission request is for a tool of laneway's own `laneway` tool server.

    AGENTS.md "Phase 4": those are allowed at once whatever `--permissions` says (they act on
    the run's own task only), so a reviewer seat never waits for a person to click Allow on its
    own verdict. The names come from the agent, which could as well act without asking: a
    request is the agent's courtesy, not a boundary, so trusting its naming grants nothing.
    """
    names: list[object] = [tool_call.get("title"), tool_call.get("name")]
    meta = tool_call.get("_meta")
    if isinstance(meta, dict):
        for value in meta.values():
            if isinstance(value, dict):
                names.append(value.get("toolName"))
                server = value.get("mcpServer")
                if isinstance(server, dict) and server.get("name") == SERVER_NAME:
                    return True
    return any(isinstance(n, str) and n.strip() in _LANEWAY_NAMES for n in names)


class LanewayClient:
    """The `acp.Client` laneway is; one per agent process."""

    def __init__(self, post: Post, policy: PermissionPolicy) -> None:
        self.post = post
        self.policy = policy
        self.cwd: Path | None = None
        self.replaying = False
        self._heard = 0.0  # time.monotonic() of the last session/update
        self.mode: str | None = None
        self.config_options: list[Any] | None = None
        self.usage: TokenUsage | None = None
        self.asks: set[asyncio.Future[str | None]] = set()
        self.forms: set[asyncio.Future[ElicitationAnswer]] = set()
        self._chunk_kind: str | None = None
        self._chunk_id: str | None = None
        self._chunks: list[str] = []
        self._chunk_chars = 0
        self._quiet: asyncio.TimerHandle | None = None
        self._announced: dict[str, dict[str, Any]] = {}
        self.closing = ""
        """The text of the last message item of the turn (what the agent said last)."""

    # -- transcript -------------------------------------------------------------------------

    def flush(self) -> None:
        """Post the message or thought text gathered so far as one item."""
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None
        if self._chunk_kind is not None and self._chunks:
            kind: ItemKind = "message" if self._chunk_kind == "message" else "thought"
            text = "".join(self._chunks)
            if kind == "message":
                self.closing = text
            self.post(item(kind, text))
        self._chunk_kind, self._chunk_id, self._chunks, self._chunk_chars = None, None, [], 0

    def _chunk(self, kind: str, text: str, message_id: str | None) -> None:
        """One streamed chunk, joined to the message it belongs to (issue 41 item 8): the
        item ends at a boundary - a chunk of the other kind or of another message
        (`messageId`), any other update, a permission question, the turn's end - or at the
        item's bound (MAX_TEXT: the rest goes on in the next item)."""
        if (
            kind != self._chunk_kind
            or message_id != self._chunk_id
            or self._chunk_chars + len(text) > MAX_TEXT
        ):
            self.flush()
            self._chunk_kind, self._chunk_id = kind, message_id
        self._chunks.append(text)
        self._chunk_chars += len(text)
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None
        if message_id is None:
            # Unmarked chunks have no end but the next boundary: a pause ends the item, so the
            # board sees it while the turn runs rather than at its end. A marked message goes
            # on across pauses, as one item.
            self._quiet = asyncio.get_running_loop().call_later(CHUNK_QUIET, self.flush)

    async def replay_done(self) -> None:
        """Wait until a session/load's replay has gone quiet (REPLAY_QUIET, at most
        REPLAY_LIMIT after the answer). ACP says the agent answers session/load once the whole
        conversation is replayed, but Gemini CLI 0.61 answers first and streams its replay
        after: updates that come before the next prompt belong to the replay, not the turn."""
        began = self._heard = time.monotonic()
        while (left := self._heard + REPLAY_QUIET - time.monotonic()) > 0:
            if time.monotonic() - began >= REPLAY_LIMIT:
                return
            await asyncio.sleep(left)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self._heard = time.monotonic()
        if isinstance(update, CurrentModeUpdate):
            self.mode = update.current_mode_id
            return
        if isinstance(update, ConfigOptionUpdate):
            self.config_options = list(update.config_options)
            return
        if isinstance(update, UsageUpdate):
            self.usage = TokenUsage(
                input_tokens=self.usage.input_tokens if self.usage else None,
                output_tokens=self.usage.output_tokens if self.usage else None,
                total_tokens=self.usage.total_tokens if self.usage else None,
                context_used=update.used,
                context_size=update.size,
                cost=update.cost.amount if update.cost else None,
                currency=update.cost.currency if update.cost else None,
            )
        if isinstance(update, ToolCallStart | ToolCallProgress):
            self._announce(dump(update))
        if self.replaying:
            return  # session/load replays a conversation laneway has already kept
        if isinstance(update, AgentMessageChunk):
            self._chunk("message", block_text(update.content), update.message_id)
        elif isinstance(update, AgentThoughtChunk):
            self._chunk("thought", block_text(update.content), update.message_id)
        elif (found := update_item(update, self.cwd)) is not None:
            self.flush()
            self.post(found)

    def _announce(self, call: dict[str, Any]) -> None:
        call_id = call.get("toolCallId")
        if not isinstance(call_id, str):
            return
        known = self._announced.pop(call_id, {})
        self._announced[call_id] = {**known, **{k: call[k] for k in _FILLED if k in call}}
        while len(self._announced) > ANNOUNCED:
            del self._announced[next(iter(self._announced))]

    def _filled(self, tool_call: dict[str, Any]) -> dict[str, Any]:
        """A permission request's tool call with what the agent announced of it before: codex-acp
        asks about an MCP tool call by its id and kind alone, its name only in the announcement."""
        known = self._announced.get(str(tool_call.get("toolCallId")), {})
        return {**{k: v for k, v in known.items() if k not in tool_call}, **tool_call}

    # -- permissions ------------------------------------------------------------------------

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[AcpPermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self.flush()
        request = PermissionRequest(
            session_id,
            self._filled(dump(tool_call)),
            tuple(PermissionOption(o.option_id, o.name, o.kind) for o in options),
        )
        kind = request.tool_kind
        if laneway_tool(request.tool_call):
            chosen, by = pick(request.options, ALLOW_KINDS), "laneway-tool"
        elif kind is not None and kind in self.policy.auto_allow:
            chosen, by = pick(request.options, ALLOW_KINDS), "auto-allow"
        elif self.policy.mode == "allow":
            chosen, by = pick(request.options, ALLOW_KINDS), "policy:allow"
        elif self.policy.mode == "deny":
            chosen, by = pick(request.options, REJECT_KINDS), "policy:deny"
        else:
            answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
            self.asks.add(answer)
            try:
                self.post(Ask(request, answer))
                chosen, by = await answer, "person"
            finally:
                self.asks.discard(answer)
        title = str(request.tool_call.get("title") or kind or "tool call")
        self.post(
            item(
                "permission",
                f"{title}: {chosen or 'cancelled'}",
                {
                    "tool_call": request.tool_call,
                    "options": [attrs.asdict(o) for o in request.options],
                    "option_id": chosen,
                    "decided_by": by,
                },
            )
        )
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(option_id=chosen, outcome="selected")
        )

    def cancel_asks(self) -> None:
        """ACP: once a turn is cancelled, every pending permission question answers cancelled
        (and every form question: `cancel`)."""
        for answer in list(self.asks):
            if not answer.done():
                answer.set_result(None)
        for form in list(self.forms):
            if not form.done():
                form.set_result(ElicitationAnswer("cancel"))

    # -- questions (elicitation/create, form mode) --------------------------------------------

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        """A form question becomes a question on the board (CLI.md `question`) the turn waits
        on; a URL question, or a form laneway cannot show, is declined with a warning."""
        self.flush()
        if not isinstance(mode, ElicitationFormSessionMode | ElicitationFormRequestMode):
            self.post(
                item("log", "agent question declined: laneway asks only forms", _level(message))
            )
            return DeclineElicitationResponse(action="decline")
        fields, unknown = form_fields(mode.requested_schema)
        if unknown:
            self.post(
                item(
                    "log",
                    "agent question declined: fields of a type laneway cannot ask: "
                    + ", ".join(unknown),
                    _level(message),
                )
            )
            return DeclineElicitationResponse(action="decline")
        session_id = getattr(mode, "session_id", None) or ""
        future: asyncio.Future[ElicitationAnswer] = asyncio.get_running_loop().create_future()
        self.forms.add(future)
        try:
            self.post(Elicit(ElicitationRequest(session_id, message, tuple(fields)), future))
            answer = await future
        finally:
            self.forms.discard(future)
        self.post(item("log", f"agent question {answer.action}: {message}", {"level": "info"}))
        if answer.action == "accept":
            return AcceptElicitationResponse(action="accept", content=dict(answer.content or {}))
        if answer.action == "decline":
            return DeclineElicitationResponse(action="decline")
        return CancelElicitationResponse(action="cancel")

    # -- the file system, confined to the session's working directory ------------------------

    def _confined(self, path: str) -> tuple[Path, str]:
        """The session's root and `path` beneath it (lexically: the open itself keeps it
        there, `confined.open_beneath`)."""
        if self.cwd is None:
            raise RequestError.invalid_params({"details": "no session is open"})
        root = self.cwd.resolve()
        try:
            return root, confined.relative(self.cwd, path)
        except ValueError as exc:
            raise RequestError.invalid_params({"details": str(exc), "path": path}) from None
        except confined.Outside:
            raise self._outside(path, root) from None

    @staticmethod
    def _outside(path: str, root: Path) -> RequestError:
        return RequestError(
            -32602,
            "path outside the session's working directory",
            {"path": path, "cwd": str(root)},
        )

    def _open(self, path: str, flags: int) -> int:
        """`path` opened once, its resolution confined to the session's working directory and
        never to a file the agent's sandbox covers (`PermissionPolicy.unseen`: whatever name
        or link led there, the file opened is the one checked)."""
        root, rel = self._confined(path)
        try:
            if flags & os.O_CREAT:
                confined.make_parents(root, rel)
            fd = confined.open_beneath(root, rel, flags)
        except confined.Outside:
            raise self._outside(path, root) from None
        except FileNotFoundError:
            raise RequestError.resource_not_found(path) from None
        except OSError as exc:
            raise RequestError.invalid_params({"details": str(exc), "path": path}) from None
        if self.policy.unseen and _covered(os.readlink(f"/proc/self/fd/{fd}"), self.policy.unseen):
            os.close(fd)
            raise RequestError(
                -32602, "path hidden by the agent's sandbox", {"path": path, "cwd": str(root)}
            )
        return fd

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        fd = self._open(path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as file:
            try:
                if os.fstat(fd).st_size > MAX_READ:
                    raise RequestError.invalid_params(
                        {"details": f"{path} is larger than {MAX_READ} bytes", "path": path}
                    )
                raw = file.read(MAX_READ + 1).decode(errors="replace")
                text = raw.replace("\r\n", "\n").replace("\r", "\n")  # as text mode reads
            except OSError as exc:  # a directory, ...
                raise RequestError.invalid_params({"details": str(exc), "path": path}) from None
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start : start + limit if limit is not None else None])
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        # truncated once checked (`_open`): opening with O_TRUNC would empty a file it refuses
        fd = self._open(path, os.O_WRONLY | os.O_CREAT)
        try:
            with os.fdopen(fd, "w") as file:
                file.truncate(0)
                file.write(content)
        except OSError as exc:
            raise RequestError.invalid_params({"details": str(exc), "path": path}) from None
        return WriteTextFileResponse()

    # -- what laneway does not serve ----------------------------------------------------------
    # The SDK answers a terminal method the client lacks with a `null` result, which an agent
    # would take for a terminal; laneway says plainly that it has none.

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/create")

    async def terminal_output(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/kill")


def _level(message: str) -> dict[str, Any]:
    return {"level": "warning", "question": message}


def _covered(real: str, unseen: frozenset[str]) -> bool:
    """Whether the file at `real` is one of `unseen`, or inside one (a directory of lock
    files)."""
    return any(real == u or real.startswith(u.rstrip("/") + "/") for u in unseen)
