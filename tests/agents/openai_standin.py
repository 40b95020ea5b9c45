"""A scripted stand-in for the OpenAI Responses API on loopback (issue 41 item 2), for the real
Codex agent (`@agentclientprotocol/codex-acp` and the `codex` binary it runs) with no
credentials and no network:

    POST /v1/responses   streaming (SSE) answered from the test's script
    anything else        404 (or an empty model list), recorded

Codex's side question for a conversation's title is answered `Card` without using the
script. A reply is `Say` (assistant text) or `Call` (a function call, or a custom tool call such as
`apply_patch` when `custom`); when the script is used up the model says `DONE`. Every request
is recorded. `codex_home` writes the CODEX_HOME whose config.toml names the stand-in as the
model provider (no OpenAI sign-in needed: a custom provider does not require one).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs

from tests.agents.standin_http import JsonHandler, held

MODEL = "gpt-5.5"


@attrs.frozen
class Say:
    text: str


@attrs.frozen
class Call:
    name: str
    arguments: Any
    """A function call's arguments (JSON-encoded for it), or a custom tool's text input."""
    custom: bool = False
    namespace: str | None = None
    """The tool's namespace: an MCP server's tools are `comment` in `mcp__laneway`."""


@attrs.frozen
class Status:
    status: int
    message: str
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Search:
    """Codex's own `tool_search` (run by the client, Codex): how the model finds the deferred
    tools of an MCP server (laneway's among them) before it calls one."""

    query: str


@attrs.frozen
class Hold:
    """The request is held until `release` is set (or the stand-in closes), then `reply`:
    the model mid-answer, for a worker killed meanwhile."""

    reply: Say | Call | Search | Status
    release: threading.Event = attrs.field(factory=threading.Event, eq=False)
    reached: threading.Event = attrs.field(factory=threading.Event, eq=False)


Reply = Say | Call | Search | Status | Hold


@attrs.define
class Standin:
    script: list[Reply]
    url: str = ""
    requests: list[tuple[str, str, Any]] = attrs.field(factory=list)
    stamps: list[float] = attrs.field(factory=list)
    """When each /v1/responses request arrived (time.monotonic())."""
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    closing: threading.Event = attrs.field(factory=threading.Event)
    ids: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))

    def responses(self) -> list[dict[str, Any]]:
        with self.lock:
            return [b for _m, p, b in self.requests if p.startswith("/v1/responses")]

    def new_id(self, prefix: str) -> str:
        with self.lock:
            return f"{prefix}_{next(self.ids):04d}"


def codex_home(standin: Standin, where: Path, **config: str) -> Path:
    """A CODEX_HOME whose config points Codex at the stand-in and keeps it off other hosts."""
    where.mkdir(parents=True, exist_ok=True)
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in config.items())
    (where / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "standin"\n'
        "check_for_update_on_startup = false\n"
        f"{extra}"
        "[analytics]\nenabled = false\n"
        "[model_providers.standin]\n"
        'name = "standin"\n'
        f'base_url = "{standin.url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "STANDIN_API_KEY"\n'
        "stream_max_retries = 0\n"
        "request_max_retries = 0\n"
    )
    return where


def _item(standin: Standin, reply: Say | Call | Search) -> dict[str, Any]:
    if isinstance(reply, Search):
        return {
            "type": "tool_search_call",
            "id": standin.new_id("tsc"),
            "status": "completed",
            "call_id": standin.new_id("call"),
            "execution": "client",
            "arguments": {"query": reply.query, "limit": 8},
        }
    if isinstance(reply, Say):
        return {
            "type": "message",
            "id": standin.new_id("msg"),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }
    if reply.custom:
        return {
            "type": "custom_tool_call",
            "id": standin.new_id("ctc"),
            "status": "completed",
            "call_id": standin.new_id("call"),
            "name": reply.name,
            "input": reply.arguments,
        }
    call = {
        "type": "function_call",
        "id": standin.new_id("fc"),
        "status": "completed",
        "call_id": standin.new_id("call"),
        "name": reply.name,
        "arguments": json.dumps(reply.arguments),
    }
    return call if reply.namespace is None else {**call, "namespace": reply.namespace}


def titling(body: Any) -> bool:
    """Whether a request is Codex's side question for the conversation's title (it asks in a
    thread of its own after the first prompt): answered without using the script."""
    return isinstance(body, dict) and "generate a very short title" in json.dumps(body.get("input"))


def _handler(standin: Standin) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            with standin.lock:
                standin.requests.append(("GET", self.path, None))
            if self.path.split("?")[0] == "/v1/models":
                return self._json(200, {"object": "list", "data": [], "models": []})
            self._json(404, {"error": {"message": "not here"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            with standin.lock:
                standin.requests.append(("POST", self.path, body))
                is_turn = self.path.split("?")[0] == "/v1/responses"
                if not is_turn:
                    reply: Reply | None = None
                elif titling(body):
                    reply = Say("Card")
                else:
                    standin.stamps.append(time.monotonic())
                    reply = standin.script.pop(0) if standin.script else Say("DONE")
            if reply is None:
                return self._json(404, {"error": {"message": "not here"}})
            if isinstance(reply, Hold):
                if not held(reply.reached, reply.release, standin.closing):
                    return
                reply = reply.reply
            if isinstance(reply, Status):
                error = {"message": reply.message, "type": "error", "code": None}
                return self._json(reply.status, {"error": error}, reply.headers)
            rid = standin.new_id("resp")
            item = _item(standin, reply)
            events: list[dict[str, Any]] = [
                {"type": "response.created", "response": {"id": rid}},
                {"type": "response.output_item.added", "output_index": 0, "item": item},
            ]
            if isinstance(reply, Say):
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": 0,
                        "content_index": 0,
                        "delta": reply.text,
                    }
                )
            events += [
                {"type": "response.output_item.done", "output_index": 0, "item": item},
                {
                    "type": "response.completed",
                    "response": {
                        "id": rid,
                        "usage": {
                            "input_tokens": 10,
                            "input_tokens_details": {"cached_tokens": 0},
                            "output_tokens": 5,
                            "output_tokens_details": {"reasoning_tokens": 0},
                            "total_tokens": 15,
                        },
                    },
                },
            ]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for event in events:
                chunk = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                self.wfile.write(chunk.encode())
                self.wfile.flush()

    return Handler


@contextmanager
def openai(script: Sequence[Reply] = ()) -> Iterator[Standin]:
    standin = Standin(list(script))
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
