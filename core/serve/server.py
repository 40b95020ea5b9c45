"""Running the application: bind, announce, serve until SIGINT/SIGTERM, stop gracefully.

uvicorn stops accepting on the first signal, lets requests in flight finish (at most
`GRACE_S`), then runs the application's shutdown. Event streams never finish on their own,
so the first signal also ends them. uvicorn would re-raise the signal once it is done (so the
process dies of it); `laneway serve` exits 0 instead, as HTTP.md promises.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Final

import uvicorn

from core.host import Host
from core.logs import logger
from core.serve.app import build_app
from core.serve.stream import Hub

GRACE_S: Final = 10


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
) -> None:
    """Serve `host` on `sock` until SIGINT/SIGTERM."""
    app = build_app(host, token=token, read_only=read_only, allow_origins=allow_origins)
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        server_header=False,
        date_header=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACE_S,
        ws="none",
    )
    address = sock.getsockname()[:2]
    server = _Server(config, app.state.hub, on_ready)
    server.run(sockets=[sock])
    logger.bind(address=address).debug("serve stopped")
