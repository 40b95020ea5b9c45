"""The ASGI application: the API routes, the event stream, the board page, and the guard that
every `/api` request passes first (token, read-only, body size)."""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from core.errors import ReadOnly
from core.host import Host
from core.serve import routes
from core.serve.http import MAX_BODY, error_response, one_line
from core.serve.stream import Hub

MAX_EVENT_ID: Final = 2**63 - 1
READS = frozenset({"GET", "HEAD", "OPTIONS"})
PAGE_HEADERS = {
    # The page loads only its own files and talks only to this server.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def static_dir() -> Path:
    return Path(str(resources.files("core.serve") / "static"))


class Guard:
    """Every `/api` request: a bearer token compared in constant time (401), no writes when
    read-only (403), no declared body past 1 MiB (413; a streamed one is cut off by
    `read_body`). Nothing about the token is logged or echoed."""

    def __init__(self, app: ASGIApp, *, token: str, read_only: bool) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self.read_only = read_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/api"):
            await self.app(scope, receive, send)
            return
        raw_headers = scope.get("headers") or []
        headers = dict(raw_headers)
        given = sum(1 for name, _value in raw_headers if name == b"authorization")
        if given > 1:
            # Which one would count is up to each proxy on the way: refuse to guess.
            await error_response(400, f"Authorization: {given} headers; send one")(
                scope, receive, send
            )
            return
        presented = headers.get(b"authorization", b"")
        if not hmac.compare_digest(presented, self._expected):
            answer = error_response(401, "unauthorized", {"WWW-Authenticate": "Bearer"})
            await answer(scope, receive, send)
            return
        if self.read_only and scope.get("method") not in READS:
            refusal = error_response(403, "this server is read-only", code=ReadOnly.code)
            await refusal(scope, receive, send)
            return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
            await error_response(413, "request body is larger than 1 MiB")(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def page(_request: Request) -> Response:
    return FileResponse(static_dir() / "index.html", headers=PAGE_HEADERS)


async def events_stream(request: Request) -> Response:
    hub: Hub = request.app.state.hub
    host: Host = request.app.state.host
    raw_last = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    last_id: int | None = None
    if raw_last is not None and raw_last.strip():
        try:
            last_id = int(raw_last)
        except ValueError:
            return error_response(400, f"Last-Event-ID: expected an event id, got {raw_last!r}")
        if last_id < 0:
            return error_response(400, "Last-Event-ID: must not be negative")
        if last_id > MAX_EVENT_ID:
            # Ids are 64-bit on PostgreSQL: a bigger one would fail in the query, mid-stream.
            return error_response(400, f"Last-Event-ID: must be at most {MAX_EVENT_ID}")
    task_id: str | None = None
    task_ref = request.query_params.get("task")
    if task_ref and "\x00" in task_ref:
        return error_response(400, "query 'task': must not contain NUL characters")
    if task_ref:
        from starlette.concurrency import run_in_threadpool

        from core.errors import NotFound

        try:
            task_id = (await run_in_threadpool(host.tasks.get, task_ref)).id
        except NotFound as exc:
            return error_response(exc.http_status, one_line(str(exc)), code=exc.code)
    return StreamingResponse(
        hub.stream(last_id, task_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    messages = {404: "not found", 405: "method not allowed"}
    return error_response(exc.status_code, messages.get(exc.status_code, one_line(exc.detail)))


def build_app(
    host: Host,
    *,
    token: str,
    read_only: bool = False,
    allow_origins: Sequence[str] = (),
    body_timeout: float = 30.0,
) -> Starlette:
    """The application for `host`. CORS stays off unless `allow_origins` names origins."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await hub.start()
        try:
            yield
        finally:
            await hub.close()

    hub = Hub(host, prune=host.writable and not read_only)
    middleware = [Middleware(Guard, token=token, read_only=read_only)]
    if allow_origins:
        middleware.insert(
            0,
            Middleware(
                CORSMiddleware,
                allow_origins=list(allow_origins),
                allow_methods=["GET", "POST", "PATCH", "DELETE"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            ),
        )
    app_routes: list[Any] = [
        Route("/", page, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/api/events", events_stream, methods=["GET"]),
        *routes.ROUTES,
        Mount("/static", app=StaticFiles(directory=static_dir()), name="static"),
    ]
    app = Starlette(
        routes=app_routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.host = host
    app.state.hub = hub
    app.state.read_only = read_only
    app.state.body_timeout = body_timeout
    return app
