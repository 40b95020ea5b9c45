"""Running the application: bind, announce, serve until SIGINT/SIGTERM, stop gracefully.

Limits (docs/serve.md, `Limits`): a connection must finish a request's headers within
`header_timeout` s of opening (or of its last answer), else it is closed; an idle keep-alive
connection is closed after `idle_timeout` s (uvicorn's `timeout_keep_alive`); a body must
arrive within `body_timeout` s (the app answers 408); past `max_connections` open connections
a new request is answered a JSON 503 at once (`Capped`; uvicorn's own `limit_concurrency`
answers in plain text); past `max_connections_per_peer` connections from one address, a new
connection from it is answered a JSON 503 and closed at once, before it counts toward the
total, so one client cannot hold the whole budget. A request head is at most
`MAX_HEADER_BYTES` whichever parser runs (httptools buffers a header line whole before uvicorn
sees it, so it is fed a head only up to the limit; h11's incomplete-event limit), else a JSON
431; a head the parser cannot read is a JSON 400, not uvicorn's plain text.

uvicorn stops accepting on the first signal, lets requests in flight finish (at most
`GRACE_S`), then runs the application's shutdown. Event streams never finish on their own,
so the first signal also ends them. uvicorn would re-raise the signal once it is done (so the
process dies of it); `laneway serve` exits 0 instead, as HTTP.md promises.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
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
LINGER_S: Final = 1.0
"""How long a refused connection (a head too large, too many from its peer) is read and
discarded after its answer before it is closed: closing a socket with unread data makes the
kernel reset it, and the client would see the reset instead of the answer."""


@attrs.frozen
class Limits:
    """What one client may hold of a `serve` process (the `laneway serve` options)."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 5.0
    max_connections: int = 1000
    max_connections_per_peer: int = 100


@attrs.define
class OpenConnections:
    """How many connections this process holds open, counted by the protocol, in all and per
    peer address (a refused connection counts in neither)."""

    count: int = 0
    by_peer: dict[str, int] = attrs.field(factory=dict)

    def admit(self, peer: str, limit: int) -> bool:
        held = self.by_peer.get(peer, 0)
        if held >= limit:
            return False
        self.by_peer[peer] = held + 1
        self.count += 1
        return True

    def release(self, peer: str) -> None:
        self.count -= 1
        held = self.by_peer.pop(peer, 1) - 1
        if held > 0:
            self.by_peer[peer] = held


def raw_error(status: int, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 answer with HTTP.md's JSON error body, for the protocol to write
    itself (before, or instead of, any request reaching the application)."""
    body = json.dumps({"error": message, "code": code}).encode()
    reason = {400: "Bad Request", 431: "Request Header Fields Too Large"}.get(
        status, "Service Unavailable"
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n"
    )
    if status == 503:
        head += "retry-after: 1\r\n"
    return (head + "\r\n").encode() + body


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


def serve_protocol(limits: Limits, opened: OpenConnections) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with serve's limits on one connection (docs/serve.md "Limits and
    timeouts"): a whole request head within `limits.header_timeout` of opening or of its last
    answer, else the connection is closed (uvicorn's keep-alive timer stops at the first byte,
    so a client trickling a header a byte at a time would hold its socket forever); at most
    `MAX_HEADER_BYTES` of head, else a JSON 431; at most `limits.max_connections_per_peer`
    connections per peer address; a head the parser refuses answered with a JSON 400."""
    base: Any = AutoHTTPProtocol
    seconds = limits.header_timeout
    httptools_parser = hasattr(base, "on_headers_complete")  # else h11, bounded by its own limit

    class Protocol(base):  # type: ignore[misc]
        _head_timer: asyncio.TimerHandle | None = None
        _peer: str | None = None
        """Set once the connection is admitted (and counted)."""
        _in_head = True
        _head_used = 0
        _refused = False

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
            peername = transport.get_extra_info("peername")
            peer = str(peername[0]) if isinstance(peername, tuple) and peername else "?"
            admitted = opened.admit(peer, limits.max_connections_per_peer)
            super().connection_made(transport)
            if not admitted:
                logger.bind(peer=peer, limit=limits.max_connections_per_peer).debug(
                    "connection refused: too many from its peer"
                )
                message = "too many connections from this address; try again"
                self._refuse(raw_error(503, message, "unavailable"))
                return
            self._peer = peer
            self._arm_head_timer()

        def _refuse(self, answer: bytes) -> None:
            """Answer and end the connection: what the client still sends is read and dropped
            for `LINGER_S` (a close with unread data would reset the answer away), then it is
            closed."""
            self._refused = True
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            transport = self.transport
            cycle = getattr(self, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                transport.close()  # an answer still being written: never interleave another
                return
            transport.write(answer)
            if transport.can_write_eof():
                transport.write_eof()
            self.loop.call_later(LINGER_S, transport.close)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if not httptools_parser:
                super().data_received(data)
                return
            # httptools hands uvicorn a header only once its line is whole, buffering it
            # meanwhile: feed it no more than the head's allowance, so no line grows past it.
            at = 0
            while at < len(data):
                if not self._in_head:
                    # a body: fed whole. A next head pipelined behind it in this read is fed
                    # unmetered, at most one read (256 KiB); the following reads are metered.
                    super().data_received(data[at:] if at else data)
                    return
                room = MAX_HEADER_BYTES - self._head_used
                if room <= 0:
                    logger.bind(client=self.client, limit=MAX_HEADER_BYTES).debug(
                        "request refused: head too large"
                    )
                    self._unset_keepalive_if_required()
                    self._refuse(
                        raw_error(
                            431,
                            f"request head: larger than {MAX_HEADER_BYTES} bytes",
                            "head_too_large",
                        )
                    )
                    return
                piece = data[at : at + room] if at or len(data) > room else data
                self._head_used += len(piece)
                at += len(piece)
                super().data_received(piece)
                if self.transport.is_closing() or self._refused:
                    return

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_head, self._head_used = True, 0

        def send_400_response(self, msg: str) -> None:
            """The parser could not read the request (a malformed request line or header, a
            head past h11's limit): HTTP.md's JSON error, not uvicorn's plain text."""
            logger.bind(client=self.client).debug("request refused: not valid HTTP/1.1")
            self._unset_keepalive_if_required()
            self._refuse(
                raw_error(400, "request: not a valid HTTP/1.1 request head", "bad_request")
            )

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            if self._peer is not None:  # None: refused at once, never counted
                opened.release(self._peer)
                self._peer = None
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
    user_header: str | None = None,
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
        user_header=user_header,
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
        http=serve_protocol(limits, opened),
        timeout_keep_alive=max(1, round(limits.idle_timeout)),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    address = sock.getsockname()[:2]
    server = _Server(config, app.state.hub, on_ready)
    server.run(sockets=[sock])
    logger.bind(address=address).debug("serve stopped")
