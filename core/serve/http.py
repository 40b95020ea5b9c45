"""Request plumbing shared by the API routes: reading a bounded body, naming bad fields, and
turning what a service raises into HTTP.md's error answers.

A route is a plain synchronous function of a `Call` (the host, path and query parameters, the
parsed body); `endpoint` wraps it into a Starlette endpoint that reads the body, runs the
function on a worker thread (services block on the database) and answers JSON.
"""

from __future__ import annotations

import asyncio
import errno
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import sqlalchemy as sa
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from core.errors import DatabaseUnusable, LanewayError
from core.logs import logger
from core.numbers import NOT_FINITE, finite
from core.shapes import plain

if TYPE_CHECKING:
    from core.host import Host

MAX_BODY: Final = 1024 * 1024
MAX_DEPTH: Final = 64
"""How deep a JSON body may nest: no route takes more than a few levels, and a deeper one
would reach the parser's recursion limit (a traceback) long before it meant anything."""
USER_ERRORS: Final = (LanewayError,)


# The `code` of an answer no LanewayError chose (HTTP.md: `{"error", "code"}` on every error).
STATUS_CODES: Final = {
    400: "bad_request",
    401: "unauthorised",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "timeout",
    409: "conflict",
    413: "too_large",
    500: "internal",
    503: "unavailable",
}


def code_of_status(status: int) -> str:
    return STATUS_CODES.get(status, "error")


class ClientGone(Exception):
    """The client of a cancellable route disconnected while it was working."""


class HttpError(Exception):
    """An answer other than success: status, one line and a stable code."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or code_of_status(status)
        self.extra = dict(extra or {})


def bad(message: str) -> HttpError:
    return HttpError(400, message)


def error_response(
    status: int,
    message: str,
    headers: Mapping[str, str] | None = None,
    *,
    code: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Response:
    body = {**(extra or {}), "error": message, "code": code or code_of_status(status)}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def one_line(text: str) -> str:
    return " ".join(text.split())


@attrs.frozen
class Reply:
    """A route's answer: a JSON value (made JSON-ready by `plain`), or a ready response."""

    value: Any = None
    status: int = 200
    response: Response | None = None


PRINCIPAL_KEY: Final = "laneway.principal"
"""Where the guard (`core.serve.app.Guard`) leaves the request's principal in the ASGI scope."""


@attrs.frozen
class Call:
    host: Host
    path: Mapping[str, str]
    query: Mapping[str, str]
    body: Any
    raw: bytes
    gone: threading.Event = attrs.field(factory=threading.Event)
    """Set when the client went away (routes built with `cancellable=True` watch for it)."""
    role: str = "viewer"
    """The role of who made the request (the guard's principal): what an answer may show.
    The least role when no principal is known (no guard in front: fail closed)."""

    def check(self) -> None:
        """Stop here if the client went away: nobody is left to read the answer."""
        if self.gone.is_set():
            raise ClientGone

    # -- the body's fields, each named when wrong ------------------------------------------------

    def obj(self) -> Mapping[str, Any]:
        if not isinstance(self.body, dict):
            raise bad("body: expected a JSON object")
        return self.body

    def text(self, field: str) -> str:
        value = self.obj().get(field)
        if value is None:
            raise bad(f"field {field!r}: required")
        if not isinstance(value, str):
            raise bad(f"field {field!r}: expected a string, got {_kind(value)}")
        if not value.strip():
            raise bad(f"field {field!r}: must not be empty")
        return value

    def opt_text(self, field: str) -> str | None:
        value = self.obj().get(field)
        if value is None:
            return None
        if not isinstance(value, str):
            raise bad(f"field {field!r}: expected a string, got {_kind(value)}")
        return value

    def opt_int(self, field: str) -> int | None:
        value = self.obj().get(field)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(f"field {field!r}: expected an integer, got {_kind(value)}")
        return value

    def flag(self, name: str) -> bool:
        raw = self.query.get(name)
        if raw is None:
            return False
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise bad(f"query {name!r}: expected true or false, got {raw!r}")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


async def read_body(request: Request) -> bytes:
    """The request body, refused with 413 past MAX_BODY (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > MAX_BODY:
                raise HttpError(413, "request body is larger than 1 MiB")
        except ValueError:
            raise bad("Content-Length: not a number") from None
    chunks: list[bytes] = []
    size = 0
    seconds = float(getattr(request.app.state, "body_timeout", 30.0))
    try:
        # A whole body within the timeout, however it is trickled: a client that opens a
        # request and sends its body a byte a minute must not hold a connection for hours.
        async with asyncio.timeout(seconds):
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY:
                    raise HttpError(413, "request body is larger than 1 MiB")
                chunks.append(chunk)
    except TimeoutError:
        raise HttpError(408, f"request body: not received within {seconds:g} s") from None
    return b"".join(chunks)


def _parse_json(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        value = json.loads(raw, parse_constant=_NotFinite, parse_float=_float)
    except UnicodeDecodeError:
        raise bad("body: not UTF-8 text") from None
    except RecursionError:
        raise bad(f"body: JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise bad(f"body: not valid JSON ({one_line(str(exc))})") from None
    _check_value(value)
    return value


class _NotFinite:
    """A number of the body that is not finite (`Infinity`, `NaN`, `1e999`), as it was
    written: refused by `_check_value`, which knows the field it is in."""

    def __init__(self, text: str) -> None:
        self.text = text


def _float(text: str) -> float | _NotFinite:
    value = finite(float(text))
    return _NotFinite(text) if value is None else value


def _check_value(value: Any) -> None:
    """A body no deeper than MAX_DEPTH, with no NUL in any text (PostgreSQL refuses NUL in a
    string where SQLite stores it: the same 400 on both instead of a driver error on one),
    and no number that is not finite (core.numbers)."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, _NotFinite):
            where = f"field {path.removeprefix('.')!r}" if path else "body"
            raise bad(f"{where}: {item.text} {NOT_FINITE}")
        if isinstance(item, str):
            if "\x00" in item:
                raise bad("body: text must not contain NUL characters")
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise bad(f"body: JSON nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((k, depth + 1, path) for k in item)
            stack.extend((v, depth + 1, f"{path}.{k}") for k, v in item.items())
        else:
            stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(item))


def check_text(where: str, value: str) -> None:
    """A path or query parameter: never with NUL (the same 400 on both databases)."""
    if "\x00" in value:
        raise bad(f"{where}: must not contain NUL characters")


Route = Callable[[Call], Reply]


def endpoint(
    route: Route, *, json_body: bool = True, cancellable: bool = False
) -> Callable[[Request], Any]:
    """A Starlette endpoint running `route` on a worker thread with HTTP.md's error rules.

    `cancellable` (a GET that may read for long): the connection is watched while the route
    works, and a client that disconnects sets `Call.gone`, which the route's `check()` calls
    turn into an early end, so an abandoned call stops taking a thread and the database."""

    async def handle(request: Request) -> Response:
        started = time.perf_counter()
        status = 500
        watcher: asyncio.Task[None] | None = None
        try:
            raw = b""
            body: Any = None
            for name, value in request.path_params.items():
                check_text(f"path {name!r}", str(value))
            for name, value in request.query_params.multi_items():
                check_text(f"query {name!r}", name + value)
            if request.method in ("POST", "PUT", "PATCH", "DELETE"):
                raw = await read_body(request)
                if json_body:
                    body = _parse_json(raw)
            call = Call(
                host=request.app.state.host,
                path=dict(request.path_params),
                query=dict(request.query_params),
                body=body,
                raw=raw,
                role=getattr(request.scope.get(PRINCIPAL_KEY), "role", "viewer"),
            )
            if cancellable:
                watcher = asyncio.create_task(_watch_disconnect(request, call.gone))
            # The answer is encoded on the worker thread too: a big board's JSON would
            # otherwise hold the event loop (and every other connection) while it is written.
            response = await run_in_threadpool(_answer, route, call)
        except HttpError as exc:
            response = error_response(exc.status, exc.message, code=exc.code, extra=exc.extra)
        except ClientDisconnect:
            # Nobody is left to answer; an ordinary event on a network, not a fault.
            logger.bind(method=request.method, path=request.url.path).debug(
                "client went away mid-body"
            )
            return Response(status_code=400)
        finally:
            if watcher is not None:
                watcher.cancel()
        status = response.status_code
        logger.bind(
            method=request.method,
            path=request.url.path,
            status=status,
            ms=round((time.perf_counter() - started) * 1000, 2),
        ).debug("request")
        return response

    return handle


async def _watch_disconnect(request: Request, gone: threading.Event) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


def _answer(route: Route, call: Call) -> Response:
    reply = _run(route, call)
    return reply.response or JSONResponse(plain(reply.value), status_code=reply.status)


def _run(route: Route, call: Call) -> Reply:
    """The route, with every exception turned into an answer (never a traceback to a client)."""
    try:
        return route(call)
    except HttpError:
        raise
    except ClientGone:
        logger.bind(route=route.__name__).debug("client went away; the call stopped")
        raise HttpError(499, "client closed the request") from None
    except USER_ERRORS as exc:
        message = one_line(str(exc)) or type(exc).__name__
        raise HttpError(exc.http_status, message, exc.code, exc.details()) from None
    except sa.exc.IntegrityError as exc:
        # A concurrent writer got there first (a unique name, a deleted parent).
        logger.bind(error=one_line(str(exc.orig or exc))).info("write refused by a constraint")
        raise HttpError(409, "conflict with a concurrent change; try again") from None
    except sa.exc.OperationalError as exc:
        logger.bind(error=one_line(str(exc.orig or exc))).warning("database error")
        raise HttpError(503, "database unavailable; try again") from None
    except sa.exc.DatabaseError as exc:
        # a damaged SQLite file: no retry mends it (the operator restores it)
        logger.bind(error=one_line(str(exc.orig or exc))).error("database damaged")
        raise HttpError(
            503, "database damaged; an operator must restore it", DatabaseUnusable.code
        ) from None
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            logger.opt(exception=True).bind(route=route.__name__).error("internal error")
            raise HttpError(500, "internal error") from None
        raise HttpError(
            400, "a path in the request is longer than the system allows", "bad_request"
        ) from None
    except Exception:  # noqa: BLE001 - the last resort: logged with its traceback, never shown
        logger.opt(exception=True).bind(route=route.__name__).error("internal error")
        raise HttpError(500, "internal error") from None
