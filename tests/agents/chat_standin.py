"""A scripted stand-in for the OpenAI chat completions API on loopback (issue 41 item 2), for the
real OpenCode agent (`opencode acp`, npm `opencode-ai`) with no credentials and no network:

    POST /v1/chat/completions   streaming (SSE `chat.completion.chunk`s) or not, from the script
    GET  /v1/models             the one model
    anything else               404, recorded
    CONNECT (as HTTP(S)_PROXY)  403, recorded in `refused`: OpenCode tries to fetch its plugin
                                package from npm at start; the proxy keeps it off the network

The script is consumed only by *conversation* requests (those that offer the model tools: the
agent loop); OpenCode also asks the model side questions (a title for the session) without
tools, and those are answered `side`. A reply is `Say` (assistant text) or `Call` (a function
call by name with its arguments, or a function of the request's body that makes them); when
the script is used up the model says `DONE`. Every request is recorded.

`opencode_env` writes the config (a provider whose `options.baseURL` is the stand-in) and
returns the environment that points OpenCode at it and keeps it off every other host.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs

from tests.agents.standin_http import JsonHandler, held

MODEL = "standin-coder"


@attrs.frozen
class Say:
    text: str


@attrs.frozen
class Call:
    name: str
    arguments: Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]]


@attrs.frozen
class Status:
    """An HTTP error answer (the model API refusing), with its headers (e.g. retry-after)."""

    status: int
    message: str
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Hold:
    """The request is held until `release` is set (or the stand-in closes), then `reply`:
    the model mid-answer, for a worker killed meanwhile."""

    reply: Say | Call | Status
    release: threading.Event = attrs.field(factory=threading.Event, eq=False)
    reached: threading.Event = attrs.field(factory=threading.Event, eq=False)


Reply = Say | Call | Status | Hold


@attrs.define
class Standin:
    script: list[Reply]
    side: str = "Writing hello"
    url: str = ""
    requests: list[tuple[str, str, Any]] = attrs.field(factory=list)
    stamps: list[float] = attrs.field(factory=list)
    """When each conversation request arrived (time.monotonic())."""
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    closing: threading.Event = attrs.field(factory=threading.Event)
    ids: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))
    refused: list[str] = attrs.field(factory=list)
    """What OpenCode tried to reach through the proxy (the stand-in) and was refused."""

    def turns(self) -> list[dict[str, Any]]:
        """The conversation requests (those offering tools), in order."""
        with self.lock:
            return [
                b
                for m, p, b in self.requests
                if m == "POST" and p.startswith("/v1/chat/completions") and _offers_tools(b)
            ]

    def strays(self) -> list[str]:
        """Requests for anything but the two paths it serves."""
        with self.lock:
            return [
                f"{m} {p}"
                for m, p, _b in self.requests
                if p.split("?")[0] not in ("/v1/chat/completions", "/v1/models")
            ]

    def new_id(self) -> str:
        with self.lock:
            return f"call_{next(self.ids):04d}"


def _offers_tools(body: Any) -> bool:
    return isinstance(body, dict) and bool(body.get("tools"))


def opencode_env(standin: Standin, home: Path, **permission: str) -> dict[str, str]:
    """OpenCode's config in `home` naming the stand-in as its one provider (the bundled
    `@ai-sdk/openai-compatible`, so nothing is installed), and the environment that uses it:
    no models.dev fetch, no default plugins, no auto-update, no LSP download, no sharing, and
    HTTP(S)_PROXY the stand-in itself, which refuses every other host (without it OpenCode
    1.18 fetches `@opencode-ai/plugin` from registry.npmjs.org at start).
    `permission`: OpenCode's permission config (e.g. `edit="ask"`)."""
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": f"standin/{MODEL}",
        "small_model": f"standin/{MODEL}",
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "standin": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Stand-in",
                "options": {"baseURL": f"{standin.url}/v1", "apiKey": "sk-standin"},
                "models": {MODEL: {"name": "Stand-in coder", "tool_call": True}},
            }
        },
        "enabled_providers": ["standin"],
        "permission": dict(permission),
    }
    where = home / ".config" / "opencode"
    where.mkdir(parents=True, exist_ok=True)
    path = where / "opencode.json"
    path.write_text(json.dumps(config, indent=2))
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "OPENCODE_CONFIG": str(path),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "HTTP_PROXY": standin.url,
        "HTTPS_PROXY": standin.url,
        "NO_PROXY": "127.0.0.1,localhost",
    }


def _chunk(cid: str, delta: Mapping[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
    }


def _message(standin: Standin, reply: Reply, body: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(reply, Say):
        return {"role": "assistant", "content": reply.text}
    arguments = reply.arguments(body) if callable(reply.arguments) else reply.arguments
    call = {
        "id": standin.new_id(),
        "type": "function",
        "function": {"name": reply.name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _chunks(cid: str, message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The message as the API streams it: the role, the content (or each tool call's head and
    then its arguments), the finish reason, and the usage."""
    out = [_chunk(cid, {"role": "assistant", "content": ""})]
    calls = message.get("tool_calls") or []
    if calls:
        for index, call in enumerate(calls):
            head = {"index": index, "id": call["id"], "type": "function"}
            head["function"] = {"name": call["function"]["name"], "arguments": ""}
            out.append(_chunk(cid, {"tool_calls": [head]}))
            rest = {"index": index, "function": {"arguments": call["function"]["arguments"]}}
            out.append(_chunk(cid, {"tool_calls": [rest]}))
        out.append(_chunk(cid, {}, "tool_calls"))
    else:
        out.append(_chunk(cid, {"content": message["content"]}))
        out.append(_chunk(cid, {}, "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    out.append({**_chunk(cid, {}), "choices": [], "usage": usage})
    return out


def _handler(standin: Standin) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_CONNECT(self) -> None:
            with standin.lock:
                standin.refused.append(self.path)
            self._json(403, {"error": "the stand-in refuses every other host"})
            self.close_connection = True

        def do_GET(self) -> None:
            with standin.lock:
                standin.requests.append(("GET", self.path, None))
            if self.path.split("?")[0] == "/v1/models":
                model = {"id": MODEL, "object": "model", "created": 1, "owned_by": "standin"}
                return self._json(200, {"object": "list", "data": [model]})
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
            if self.path.split("?")[0] != "/v1/chat/completions" or not isinstance(body, dict):
                return self._json(404, {"error": {"message": "not here"}})
            if _offers_tools(body):
                with standin.lock:
                    standin.stamps.append(time.monotonic())
                    reply = standin.script.pop(0) if standin.script else Say("DONE")
            else:
                reply = Say(standin.side)
            if isinstance(reply, Hold):
                if not held(reply.reached, reply.release, standin.closing):
                    return
                reply = reply.reply
            if isinstance(reply, Status):
                error = {"message": reply.message, "type": "error", "code": str(reply.status)}
                return self._json(reply.status, {"error": error}, reply.headers)
            with standin.lock:
                cid = f"chatcmpl-{next(standin.ids):04d}"
            message = _message(standin, reply, body)
            if not body.get("stream"):
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                choice = {"index": 0, "message": message, "finish_reason": finish}
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                return self._json(
                    200,
                    {
                        "id": cid,
                        "object": "chat.completion",
                        "created": 1,
                        "model": MODEL,
                        "choices": [choice],
                        "usage": usage,
                    },
                )
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for chunk in _chunks(cid, message):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


@contextmanager
def chat(script: Sequence[Reply] = (), side: str = "Writing hello") -> Iterator[Standin]:
    standin = Standin(list(script), side=side)
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
