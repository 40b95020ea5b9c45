"""A scripted stand-in for the Gemini API (generativelanguage `v1beta`) on loopback (issue 41
item 2), so the real Gemini CLI (`gemini --acp`, npm `@google/gemini-cli`) does real turns in CI
with no credentials and no network:

    POST /v1beta/models/{m}:streamGenerateContent?alt=sse   the agent loop, from the script (SSE)
    POST /v1beta/models/{m}:generateContent                  side questions, answered `side`
    POST /v1beta/models/{m}:countTokens                      a count from the request's size
    anything else                                            404, recorded

The script is a list of replies, one per *conversation* request (a streamed request offering
the model tools: the agent loop). The CLI also asks side questions without streaming (whether
the model or the user speaks next, a session title, loop detection, ...): those never consume
the script and get `side` as their text. A reply is `Text`, `Call` (the model calling a tool by
name with its args: a `functionCall` part), `Fail` (an HTTP error status in the API's error
shape, with headers and a RetryInfo delay) or `Hold` (the request waits until the test
releases it, then answers with the reply inside). When the script is used up the model answers
`then` (by default it says `DONE`).

Every request is recorded (path, headers, body), so a test asserts what the model saw.

Point the CLI at it with `environment(standin, home)`: GOOGLE_GEMINI_BASE_URL, a dummy
GEMINI_API_KEY, and a settings.json in the temporary HOME that turns off what reaches other
hosts (usage statistics to play.googleapis.com, telemetry, update checks, the IDE companion)
and names one model (no "auto" router asking a second model first); GEMINI_CLI_NO_RELAUNCH
keeps it one process. HTTP(S)_PROXY is the
stand-in itself, which refuses and records every request for another host (`strays`).
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
from pathlib import Path
from typing import Any

import attrs

from tests.agents.standin_http import JsonHandler, held

MODEL = "gemini-2.5-pro"

# The API's error `status` for an HTTP status (google.rpc.Code names).
STATUS_NAMES: Mapping[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@attrs.frozen
class Text:
    text: str


@attrs.frozen
class Call:
    name: str
    args: Mapping[str, Any] | Callable[[Request], Mapping[str, Any]]
    """The call's args, or a function of the request that makes them (to name a path in the
    workspace the CLI told the model about)."""
    text: str = ""
    """Said before the call, in its own part, when not empty."""


@attrs.frozen
class Fail:
    status: int
    message: str
    headers: Mapping[str, str] = attrs.field(factory=dict)
    retry_delay: str | None = None
    """A google.rpc.RetryInfo `retryDelay` (e.g. "1s") in the error's details."""


@attrs.frozen
class Hold:
    """The request is held until `release` is set (or the stand-in closes), then `reply`."""

    reply: Text | Call | Fail
    release: threading.Event = attrs.field(factory=threading.Event, eq=False)
    reached: threading.Event = attrs.field(factory=threading.Event, eq=False)


Reply = Text | Call | Fail | Hold


@attrs.frozen
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    at: float = attrs.field(factory=time.monotonic, eq=False)
    """When it arrived (time.monotonic)."""

    @property
    def model(self) -> str:
        found = re.search(r"/models/([^:/?]+):", self.path)
        return found.group(1) if found else ""

    @property
    def conversation(self) -> bool:
        """A request of the agent loop: streamed, offering the model tools."""
        return (
            self.method == "POST"
            and ":streamGenerateContent" in self.path
            and isinstance(self.body, dict)
            and bool(self.body.get("tools"))
        )

    def tool_names(self) -> list[str]:
        return [
            str(d.get("name"))
            for tool in self.body.get("tools", [])
            for d in tool.get("functionDeclarations", [])
        ]

    def parts(self) -> list[dict[str, Any]]:
        """Every part of the request's contents, in order."""
        return [
            part
            for content in self.body.get("contents", [])
            for part in content.get("parts", [])
            if isinstance(part, dict)
        ]

    def texts(self) -> list[str]:
        """Every text the request's contents (and system instruction) carry, in order."""
        system = (self.body.get("systemInstruction") or {}).get("parts", [])
        return [str(p["text"]) for p in [*system, *self.parts()] if isinstance(p.get("text"), str)]

    def said(self, text: str) -> bool:
        return any(text in t for t in self.texts())

    def function_responses(self) -> list[dict[str, Any]]:
        """The `functionResponse` parts (tool results) the request carries, in order."""
        return [p["functionResponse"] for p in self.parts() if "functionResponse" in p]

    def workdir(self) -> str:
        """The workspace directory the CLI told the model it works in."""
        for text in self.texts():
            found = re.search(r"Workspace Directories:\*\*\s*\n\s*- (\S+)", text)
            if found:
                return found.group(1)
        raise AssertionError("the request names no workspace directory")


def in_workdir(name: str, content: str) -> Callable[[Request], Mapping[str, Any]]:
    """A write_file call's args for `name` in the workspace the request names."""
    return lambda request: {"file_path": f"{request.workdir()}/{name}", "content": content}


@attrs.define
class Standin:
    script: list[Reply]
    side: str = "Scripted side answer"
    then: Reply = Text("DONE")
    """The reply to every conversation request once the script is used up."""
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
            self.requests.append(request)
            if not request.conversation:
                return Text(self.side)
            return self.script.pop(0) if self.script else self.then

    def new_id(self, prefix: str) -> str:
        with self.lock:
            return f"{prefix}_{next(self.ids):04d}"


def settings(**more: Any) -> dict[str, Any]:
    """The Gemini CLI settings that keep it on the stand-in and off every other host."""
    general: dict[str, Any] = {
        "enableAutoUpdate": False,
        "enableAutoUpdateNotification": False,
        "checkpointing": {"enabled": False},
        **more.pop("general", {}),
    }
    return {
        "general": general,
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "ide": {"enabled": False},
        "model": {"name": MODEL},
        **more,
    }


def environment(
    standin: Standin, home: str, config: Mapping[str, Any] | None = None, **more: str
) -> dict[str, str]:
    """The variables that point the Gemini CLI at `standin` (its settings.json written into
    `home`/.gemini, `config` merged over `settings()`) and keep it off every other host."""
    where = Path(home, ".gemini")
    where.mkdir(parents=True, exist_ok=True)
    (where / "settings.json").write_text(json.dumps(settings(**dict(config or {})), indent=2))
    return {
        "HOME": home,
        "GOOGLE_GEMINI_BASE_URL": standin.url,
        "GEMINI_API_KEY": "standin-key",
        "GEMINI_MODEL": MODEL,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        # one node process, not a second one relaunched with a larger heap: a start ~2 s sooner
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "HTTP_PROXY": standin.url,
        "HTTPS_PROXY": standin.url,
        "NO_PROXY": "127.0.0.1,localhost",
        **more,
    }


def _usage() -> dict[str, int]:
    return {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


def _parts(request: Request, reply: Text | Call) -> list[dict[str, Any]]:
    if isinstance(reply, Text):
        return [{"text": reply.text}]
    args = reply.args(request) if callable(reply.args) else reply.args
    call = {"functionCall": {"name": reply.name, "args": dict(args)}}
    return [{"text": reply.text}, call] if reply.text else [call]


def _response(request: Request, reply: Text | Call) -> dict[str, Any]:
    content = {"role": "model", "parts": _parts(request, reply)}
    return {
        "candidates": [{"content": content, "finishReason": "STOP", "index": 0}],
        "usageMetadata": _usage(),
        "modelVersion": request.model or MODEL,
    }


def _error(fail: Fail) -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": fail.status,
        "message": fail.message,
        "status": STATUS_NAMES.get(fail.status, "UNKNOWN"),
    }
    if fail.retry_delay is not None:
        error["details"] = [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": fail.retry_delay}
        ]
    return {"error": error}


def _handler(standin: Standin) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        content_type = "application/json; charset=UTF-8"

        def _stray(self) -> None:
            with standin.lock:
                standin.strays.append(f"{self.command} {self.path}")
            self._json(403, {"error": {"code": 403, "message": "the stand-in refuses it"}})
            self.close_connection = True

        def do_CONNECT(self) -> None:
            self._stray()

        def do_GET(self) -> None:
            if not self.path.startswith("/"):
                return self._stray()
            with standin.lock:
                standin.requests.append(Request("GET", self.path, dict(self.headers), None))
            self._json(404, _error(Fail(404, "not here")))

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
            if not path.startswith("/v1beta/models/") or not isinstance(body, dict):
                with standin.lock:
                    standin.requests.append(request)
                return self._json(404, _error(Fail(404, "not here")))
            if path.endswith(":countTokens"):
                with standin.lock:
                    standin.requests.append(request)
                return self._json(200, {"totalTokens": max(1, len(raw) // 4)})
            reply = standin.next_reply(request)
            if isinstance(reply, Hold):
                if not held(reply.reached, reply.release, standin.closing):
                    return
                reply = reply.reply
            if isinstance(reply, Fail):
                return self._json(reply.status, _error(reply), reply.headers)
            if not path.endswith(":streamGenerateContent"):
                return self._json(200, _response(request, reply))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            chunk = f"data: {json.dumps(_response(request, reply))}\r\n\r\n"
            self.wfile.write(chunk.encode())
            self.wfile.flush()

    return Handler


@contextmanager
def gemini(
    script: Sequence[Reply] = (), side: str = "Scripted side answer", then: Reply = Text("DONE")
) -> Iterator[Standin]:
    """A stand-in serving on a free loopback port for the `with` block."""
    standin = Standin(list(script), side, then)
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
