"""The ASGI application: the API routes, the event stream, the board page, and the guard that
every `/api` request passes first (cross-site writes, token, read-only, body size)."""

from __future__ import annotations

import contextlib
import hmac
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

import attrs
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from core import actors
from core.errors import ReadOnly
from core.host import Host
from core.logs import logger
from core.serve import roles, routes
from core.serve.http import MAX_BODY, PRINCIPAL_KEY, HttpError, error_response, one_line
from core.serve.stream import SEND_KEY, Hub, StreamResponse
from core.services import users
from core.store.database import Store

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


@attrs.frozen
class Principal:
    """Who a request is: the board's admin token (`admin`) or a person (`laneway user`)."""

    name: str
    role: str

    @property
    def actor(self) -> str:
        return actors.user(self.name)

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "role": self.role, "actor": self.actor}


SAME_ORIGIN_SITES: Final = frozenset({"same-origin", "none"})
"""The `Sec-Fetch-Site` values a write may carry (as Go 1.25's `http.CrossOriginProtection`).

A token in the `Authorization` header cannot ride a cross-site request, but a cookie can: behind
a signing-in proxy (`--user-header`) the browser sends the proxy's cookie with any page's
"simple" POST (an HTML form with `enctype=text/plain` needs no preflight), the proxy turns it
into the person's name, and the body is read as JSON whatever its Content-Type. So a write is
refused when the browser says it came from another site (`Sec-Fetch-Site`), or, from a browser
too old to say so, when its `Origin` is not this server (`Host`, or the `X-Forwarded-Host` a
proxy sets: no page can set that header cross-site without a preflight, which is never granted
for it). A request with neither header is no browser's (curl, scripts, the CLI) and passes;
`Origin: null` (a sandboxed frame, a `data:` page) is never this server. The origins
`--allow-origin` names are trusted to write too: that is what CORS was turned on for."""


def cross_site(headers: dict[bytes, bytes], trusted: frozenset[str] = frozenset()) -> str | None:
    """What shows a write came from another site's page (for the 403), or None when it may go
    on. `trusted`: the origins `--allow-origin` names, whose pages may write."""

    def header(name: bytes) -> str:
        return headers.get(name, b"").decode("latin-1").strip()

    origin, site = header(b"origin"), header(b"sec-fetch-site").lower()
    if site:
        if site in SAME_ORIGIN_SITES or origin in trusted:
            return None
        return f"Sec-Fetch-Site: {site}"
    if not origin or origin in trusted:
        return None
    host = header(b"host")
    ours = {h.strip().lower() for h in [host, *header(b"x-forwarded-host").split(",")]}
    ours.discard("")
    try:
        netloc = urllib.parse.urlsplit(origin).netloc.lower()
    except ValueError:
        netloc = ""
    if origin != "null" and netloc and netloc in ours:
        return None
    return f"Origin: {origin}, Host: {host or '(none)'}"


class Guard:
    """Every `/api` request: no write from another site's page (403, `SAME_ORIGIN_SITES`), who
    it is (401), whether their role may make it (403 naming the role it needs,
    `core.serve.roles`), no writes when read-only (403), no declared body past 1 MiB (413; a
    streamed one is cut off by `read_body`). Then the request runs as its person
    (`core.actors`). Nothing about a token is logged or echoed.

    A token is the board's admin token (compared in constant time) or a person's, found by
    its hash in the database on every request, so a removed person or a replaced token is
    refused at once by every `serve` of the board. With `user_header`, a request carrying
    that header is the person it names (a reverse proxy in front verified them)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        read_only: bool,
        store: Store,
        table: roles.Table,
        user_header: str | None = None,
        trusted_origins: Sequence[str] = (),
    ) -> None:
        self.app = app
        # "*" lets any page read through CORS; it must not let any page write
        self.trusted = frozenset(o for o in trusted_origins if o not in ("*", "null"))
        self._expected = f"Bearer {token}".encode()
        self.read_only = read_only
        self.store = store
        self.table = table
        self.user_header = user_header.lower().encode() if user_header else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/api"):
            await self.app(scope, receive, send)
            return
        raw_headers = scope.get("headers") or []
        headers = dict(raw_headers)
        if scope.get("method") not in READS:
            seen = cross_site(headers, self.trusted)
            if seen is not None:
                message = f"a cross-site request may not change the board ({seen[:200]})"
                await error_response(403, one_line(message))(scope, receive, send)
                return
        given = sum(1 for name, _value in raw_headers if name == b"authorization")
        if given > 1:
            # Which one would count is up to each proxy on the way: refuse to guess.
            await error_response(400, f"Authorization: {given} headers; send one")(
                scope, receive, send
            )
            return
        try:
            principal = await self._principal(headers)
        except HttpError as exc:
            extra = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            await error_response(exc.status, exc.message, extra)(scope, receive, send)
            return
        needed = self.table.needed(scope)
        if needed is not None and not roles.allows(principal.role, needed):
            refusal = error_response(
                403,
                f"this request needs the {needed} role; {principal.name} is {principal.role}",
                extra={"role": needed},
            )
            await refusal(scope, receive, send)
            return
        if self.read_only and scope.get("method") not in READS:
            refusal = error_response(403, "this server is read-only", code=ReadOnly.code)
            await refusal(scope, receive, send)
            return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
            await error_response(413, "request body is larger than 1 MiB")(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        with actors.acting(principal.actor):
            await self.app(scope, receive, send)

    async def _principal(self, headers: dict[bytes, bytes]) -> Principal:
        try:
            return await self._lookup(headers)
        except sa.exc.SQLAlchemyError as exc:
            logger.bind(error=one_line(str(getattr(exc, "orig", None) or exc))).warning(
                "database error while checking a token"
            )
            raise HttpError(503, "database unavailable; try again") from None

    async def _lookup(self, headers: dict[bytes, bytes]) -> Principal:
        if self.user_header is not None and self.user_header in headers:
            name = headers[self.user_header].decode("latin-1")
            found = await run_in_threadpool(users.authenticate_name, self.store, name)
            if found is None:
                raise HttpError(401, "unauthorized: the proxy named no user of this board")
            return Principal(found.name, found.role)
        presented = headers.get(b"authorization", b"")
        if hmac.compare_digest(presented, self._expected):
            return Principal(users.ADMIN_NAME, roles.ADMIN)
        scheme, _, token = presented.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise HttpError(401, "unauthorized")
        problem = users.token_problem(token)
        if problem is not None:
            raise HttpError(400, problem)
        found = await run_in_threadpool(users.authenticate, self.store, token)
        if found is None:
            raise HttpError(401, "unauthorized")
        return Principal(found.name, found.role)


async def me(request: Request) -> Response:
    """Who the request's token is (`GET /api/me`): the page shows it and hides what the role
    may not do."""
    principal: Principal = request.scope[PRINCIPAL_KEY]
    return JSONResponse(principal.as_json())


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
    return StreamResponse(hub.stream(last_id, task_id))


async def http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    messages = {404: "not found", 405: "method not allowed"}
    return error_response(exc.status_code, messages.get(exc.status_code, one_line(exc.detail)))


class App(Starlette):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SEND_KEY] = send  # for the event stream's body (core.serve.stream.SEND_KEY)
        await super().__call__(scope, receive, send)


def build_app(
    host: Host,
    *,
    token: str,
    read_only: bool = False,
    allow_origins: Sequence[str] = (),
    body_timeout: float = 30.0,
    user_header: str | None = None,
) -> Starlette:
    """The application for `host`. CORS stays off unless `allow_origins` names origins;
    `user_header` (serve `--user-header`) trusts a reverse proxy's verified user header."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await hub.start()
        try:
            yield
        finally:
            await hub.close()

    hub = Hub(host, prune=host.writable and not read_only)
    app_routes: list[Any] = [
        Route("/", page, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/api/events", events_stream, methods=["GET"]),
        Route("/api/me", me, methods=["GET"]),
        *routes.ROUTES,
        Mount("/static", app=StaticFiles(directory=static_dir()), name="static"),
    ]
    middleware = [
        Middleware(
            Guard,
            token=token,
            read_only=read_only,
            store=host.store,
            table=roles.Table(app_routes),
            user_header=user_header,
            trusted_origins=allow_origins,
        )
    ]
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
    app = App(
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
