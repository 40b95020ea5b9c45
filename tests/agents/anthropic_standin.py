"""A scripted stand-in for the Anthropic Messages API on loopback (issue 41 item 2), so the real
Claude Code agent (`@agentclientprotocol/claude-agent-acp` and the `claude` binary it spawns)
does real turns in CI with no credentials and no network:

    POST /v1/messages               streaming (SSE) or not, answered from the test's script
    POST /v1/messages/count_tokens  a token count from the request's size
    anything else                   404, recorded

The script is a list of replies, one per *conversation* request (a request that offers the
model tools: the agent loop). Claude Code also asks side questions of the model (a title, a
guess at the user's next prompt, ...): those never consume the script and get `side` as their
text. A reply is `Text`, `ToolUse` (the model calling a tool by name with an input), `Fail`
(an HTTP error status, with headers such as retry-after) or `Hold` (the request waits until the
test releases it, then answers with the reply inside). When the script is used up the model
answers `then` (by default it says `DONE`).

Every request is recorded (path, headers, body), so a test asserts what the model saw.

Point the agent at it with `environment(standin)`: ANTHROPIC_BASE_URL, a dummy key, and the
variables that keep Claude Code from reaching anything else (telemetry, error reporting, the
auto-updater, "nonessential traffic"); HTTP(S)_PROXY is the stand-in itself, which refuses
and records every request for another host (`strays`), so a test can assert there were none.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

from tests.agents.standin_http import JsonHandler, held

MODEL = "claude-sonnet-4-5"


@attrs.frozen
class Text:
    text: str


@attrs.frozen
class ToolUse:
    name: str
    input: Mapping[str, Any] | Callable[[Request], Mapping[str, Any]]
    """The tool's input, or a function of the request that makes it (to name a path in the
    working directory the agent told the model about)."""
    text: str = ""
    """Said before the call, in its own text block, when not empty."""


@attrs.frozen
class Fail:
    status: int
    kind: str
    message: str
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Hold:
    """The request is held until `release` is set (or the connection drops), then `reply`."""

    reply: Text | ToolUse | Fail
    release: threading.Event = attrs.field(factory=threading.Event, eq=False)
    reached: threading.Event = attrs.field(factory=threading.Event, eq=False)


Reply = Text | ToolUse | Fail | Hold


@attrs.frozen
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    at: float = attrs.field(factory=time.monotonic, eq=False)
    """When it arrived (time.monotonic)."""

    @property
    def conversation(self) -> bool:
        """A request of the agent loop: it offers the model tools (and is not Claude Code's
        guess at the user's next prompt, which offers them too, for the prompt cache)."""
        return (
            self.method == "POST"
            and self.path.split("?")[0] == "/v1/messages"
            and isinstance(self.body, dict)
            and bool(self.body.get("tools"))
            and not self.said("[SUGGESTION MODE")
        )

    def tool_names(self) -> list[str]:
        return [str(t.get("name")) for t in self.body.get("tools", [])]

    def texts(self) -> list[str]:
        """Every text the request's messages (and system prompt) carry, in order."""
        found: list[str] = []

        def walk(content: Any) -> None:
            if isinstance(content, str):
                found.append(content)
            elif isinstance(content, list):
                for block in content:
                    if isinstance(block, dict):
                        if isinstance(block.get("text"), str):
                            found.append(block["text"])
                        walk(block.get("content"))

        walk(self.body.get("system"))
        for message in self.body.get("messages", []):
            walk(message.get("content"))
        return found

    def said(self, text: str) -> bool:
        return any(text in t for t in self.texts())

    def workdir(self) -> str:
        """The working directory Claude Code told the model it works in."""
        for text in self.texts():
            found = re.search(r"Primary working directory: (\S+)", text)
            if found:
                return found.group(1)
        raise AssertionError("the request names no working directory")


def in_workdir(name: str, content: str) -> Callable[[Request], Mapping[str, Any]]:
    """A Write input for `name` in the working directory the request names."""
    return lambda request: {"file_path": f"{request.workdir()}/{name}", "content": content}


@attrs.define
class Standin:
    script: list[Reply]
    side: str = "Scripted title"
    then: Reply = Text("DONE")
    """The reply to every conversation request once the script is used up."""
    keep: bool = True
    """Whether requests are recorded (a benchmark's thousands of them are only counted)."""
    answered: int = 0
    url: str = ""
    requests: list[Request] = attrs.field(factory=list)
    strays: list[str] = attrs.field(factory=list)
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    ids: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))
    closing: threading.Event = attrs.field(factory=threading.Event)

    def conversation(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.conversation]

    def next_reply(self, request: Request) -> Reply:
        with self.lock:
            self.answered += 1
            if self.keep:
                self.requests.append(request)
            if not request.conversation:
                return Text(self.side)
            return self.script.pop(0) if self.script else self.then

    def new_id(self, prefix: str) -> str:
        with self.lock:
            return f"{prefix}_{next(self.ids):04d}"


def environment(standin: Standin, home: str, **more: str) -> dict[str, str]:
    """The variables that point Claude Code at `standin` and keep it off every other host."""
    return {
        "HOME": home,
        "ANTHROPIC_BASE_URL": standin.url,
        "ANTHROPIC_API_KEY": "sk-ant-standin",
        "ANTHROPIC_MODEL": MODEL,
        "ANTHROPIC_SMALL_FAST_MODEL": MODEL,
        "CLAUDE_CONFIG_DIR": f"{home}/.claude",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION": "false",
        "HTTP_PROXY": standin.url,
        "HTTPS_PROXY": standin.url,
        "NO_PROXY": "127.0.0.1,localhost",
        **more,
    }


def _usage(output: int = 1) -> dict[str, int]:
    return {
        "input_tokens": 10,
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _blocks(
    standin: Standin, request: Request, reply: Text | ToolUse
) -> tuple[list[dict[str, Any]], str]:
    """The reply's content blocks and stop reason."""
    if isinstance(reply, Text):
        return [{"type": "text", "text": reply.text}], "end_turn"
    blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    tool = {"type": "tool_use", "id": standin.new_id("toolu"), "name": reply.name}
    given = reply.input(request) if callable(reply.input) else reply.input
    blocks.append({**tool, "input": dict(given)})
    return blocks, "tool_use"


def _events(
    standin: Standin, request: Request, model: str, reply: Text | ToolUse
) -> Iterator[dict[str, Any]]:
    blocks, stop = _blocks(standin, request, reply)
    yield {
        "type": "message_start",
        "message": {
            "id": standin.new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(),
        },
    }
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            yield {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            }
            yield {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": block["text"]},
            }
        else:
            yield {
                "type": "content_block_start",
                "index": index,
                "content_block": {**block, "input": {}},
            }
            yield {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
            }
        yield {"type": "content_block_stop", "index": index}
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": 5},
    }
    yield {"type": "message_stop"}


def _handler(standin: Standin) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def more_headers(self) -> Mapping[str, str]:
            return {"request-id": standin.new_id("req")}

        def _stray(self) -> None:
            with standin.lock:
                standin.strays.append(f"{self.command} {self.path}")
            self._json(403, {"error": "the stand-in refuses every other host"})
            self.close_connection = True

        def do_CONNECT(self) -> None:
            self._stray()

        def do_GET(self) -> None:
            if not self.path.startswith("/"):
                return self._stray()
            with standin.lock:
                standin.requests.append(Request("GET", self.path, dict(self.headers), None))
            self._json(404, {"type": "error", "error": {"type": "not_found_error"}})

        def do_POST(self) -> None:
            if not self.path.startswith("/"):
                return self._stray()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            request = Request("POST", self.path, dict(self.headers), body)
            path = self.path.split("?")[0]
            if path == "/v1/messages/count_tokens":
                with standin.lock:
                    standin.requests.append(request)
                return self._json(200, {"input_tokens": max(1, len(raw) // 4)})
            if path != "/v1/messages" or not isinstance(body, dict):
                with standin.lock:
                    standin.requests.append(request)
                return self._json(404, {"type": "error", "error": {"type": "not_found_error"}})
            reply = standin.next_reply(request)
            if isinstance(reply, Hold):
                if not held(reply.reached, reply.release, standin.closing):
                    return
                reply = reply.reply
            if isinstance(reply, Fail):
                error = {"type": reply.kind, "message": reply.message}
                return self._json(reply.status, {"type": "error", "error": error}, reply.headers)
            model = str(body.get("model") or MODEL)
            if not body.get("stream"):
                blocks, stop = _blocks(standin, request, reply)
                return self._json(
                    200,
                    {
                        "id": standin.new_id("msg"),
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": blocks,
                        "stop_reason": stop,
                        "stop_sequence": None,
                        "usage": _usage(5),
                    },
                )
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("request-id", standin.new_id("req"))
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for event in _events(standin, request, model, reply):
                chunk = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                self.wfile.write(chunk.encode())
                self.wfile.flush()

    return Handler


@contextmanager
def anthropic(
    script: Sequence[Reply] = (),
    side: str = "Scripted title",
    then: Reply = Text("DONE"),
    keep: bool = True,
) -> Iterator[Standin]:
    """A stand-in serving on a free loopback port for the `with` block."""
    standin = Standin(list(script), side, then, keep)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(standin))
    server.daemon_threads = True
    standin.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield standin
    finally:
        standin.closing.set()
        server.shutdown()
        server.server_close()
