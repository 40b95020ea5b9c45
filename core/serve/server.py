"""Running the application: bind, announce, serve until SIGINT/SIGTERM, stop gracefully.

Limits (docs/serve.md, `Limits`): a connection must finish a request's headers within
`header_timeout` s of opening (or of its last answer), else it is closed; an idle keep-alive
connection is closed after `idle_timeout` s (uvicorn's `timeout_keep_alive`); a body must
arrive within `body_timeout` s (the app answers 408); past `max_connections` open connections
a new request is answered a JSON 503 at once (`Capped`; uvicorn's own `limit_concurrency`
answers in plain text). Headers are capped at
`MAX_HEADER_BYTES` (h11's incomplete-event limit; httptools has its own fixed cap).

uvicorn stops accepting on the first signal, lets requests in flight finish (at most
`GRACE_S`), then runs the application's shutdown. Event streams never finish on their own,
so the first signal also ends them. uvicorn would re-raise the signal once it is done (so the
process dies of it); `laneway serve` exits 0 instead, as HTTP.md promises.
"""

from __future__ import annotations

import asyncio
import ipaddress
import resource
import socket
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, Final

import attrs
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from core.host import Host
from core.logs import logger
from core.serve.app import build_app
from core.serve.http import error_response
from core.serve.stream import Hub

GRACE_S: Final = 10
MAX_HEADER_BYTES: Final = 64 * 1024


@attrs.frozen
class Limits:
    """What one client may hold of a `serve` process (the `laneway serve` options)."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 5.0
    max_connections: int = 1000


@attrs.define
class OpenConnections:
    """How many connections this process holds open, counted by the protocol."""

    count: int = 0


class Capped:
    """Past `limit` open connections, every request is answered 503 (HTTP.md's JSON error)
    at once, before the app does any work; the connections already open keep their turn."""

    def __init__(self, app: ASGIApp, opened: OpenConnections, limit: int) -> None:
        self.app = app
        self.opened = opened
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.opened.count > self.limit:
            logger.bind(open=self.opened.count, limit=self.limit).debug(
                "request refused: too many connections"
            )
            refusal = error_response(
                503, "too many connections; try again", {"Retry-After": "1", "Connection": "close"}
            )
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


def protocol_with_header_timeout(seconds: float, opened: OpenConnections) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, closing a connection that has not sent a whole request head
    within `seconds` of opening or of its last answer. uvicorn has no such timeout of its
    own: its keep-alive timer stops at the first byte, so a client trickling a header a byte
    at a time would hold its connection (and a file descriptor) forever."""
    base: Any = AutoHTTPProtocol

    class Protocol(base):  # type: ignore[misc]
        _head_timer: asyncio.TimerHandle | None = None

        def _arm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(seconds, self._head_timed_out)

        def _head_timed_out(self) -> None:
            self._head_timer = None
            cycle = self.cycle
            waiting_for_head = cycle is None or cycle.response_complete
            if waiting_for_head and not self.transport.is_closing():
                logger.bind(client=self.client, seconds=seconds).debug(
                    "connection closed: no request head in time"
                )
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:
            opened.count += 1
            super().connection_made(transport)
            self._arm_head_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            opened.count -= 1
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

    return Protocol


def _room_for(connections: int) -> None:
    """Raise the soft limit of open files toward the hard one, so `max_connections` clients
    (and the database's files) fit before the process runs out of descriptors."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = connections + 256
        if soft != resource.RLIM_INFINITY and soft < wanted:
            new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        if soft != resource.RLIM_INFINITY and soft < wanted:
            logger.bind(open_files=soft, max_connections=connections).warning(
                "the open-file limit is below --max-connections; raise it (ulimit -n)"
            )
    except (ValueError, OSError) as exc:
        logger.bind(error=str(exc)).debug("could not raise the open-file limit")


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, hub: Hub, on_ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._hub = hub
        self._on_ready = on_ready

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._hub.stop_soon()
        super().handle_exit(sig, frame)
        self._captured_signals.clear()  # a handled stop is a clean exit, not a death by signal

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._on_ready()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free port; read the chosen one from the socket)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are
    # TCP, and without it every response waits ~40 ms for the client's delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def run(
    host: Host,
    sock: socket.socket,
    *,
    token: str,
    read_only: bool,
    allow_origins: Sequence[str] = (),
    on_ready: Callable[[], None],
    limits: Limits | None = None,
) -> None:
    """Serve `host` on `sock` until SIGINT/SIGTERM."""
    limits = limits or Limits()
    app = build_app(
        host,
        token=token,
        read_only=read_only,
        allow_origins=allow_origins,
        body_timeout=limits.body_timeout,
    )
    _room_for(limits.max_connections)
    opened = OpenConnections()
    config = uvicorn.Config(
        Capped(app, opened, limits.max_connections),
        log_config=None,
        access_log=False,
        server_header=False,
        date_header=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACE_S,
        ws="none",
        http=protocol_with_header_timeout(limits.header_timeout, opened),
        timeout_keep_alive=max(1, round(limits.idle_timeout)),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    address = sock.getsockname()[:2]
    server = _Server(config, app.state.hub, on_ready)
    server.run(sockets=[sock])
    logger.bind(address=address).debug("serve stopped")
