"""`laneway serve`: the HTTP API, the live event stream and the board page (HTTP.md)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.numbers import FiniteFloat
from core.errors import LanewayError
from core.logs import logger

if TYPE_CHECKING:
    from core.host import Host

_TOKEN_OK = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")


_HEADER_OK = re.compile(r"[A-Za-z0-9-]{1,100}")


def _token(given: str | None) -> str:
    token = given if given is not None else os.environ.get("LANEWAY_TOKEN") or None
    if token is None:
        return secrets.token_urlsafe(32)  # 256 bits
    if not _TOKEN_OK.fullmatch(token):
        # Never echo the token itself: a message is a log line.
        raise LanewayError(
            "token: 16 to 512 characters from A-Z a-z 0-9 . _ ~ + / = - (a bearer token)"
        )
    return token


@click.command("serve")
@click.option("--host", "bind_host", default="127.0.0.1", show_default=True, metavar="H")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option("--token", metavar="T", help="Bearer token (env LANEWAY_TOKEN; default: random).")
@click.option("--read-only", is_flag=True, help="Refuse every write with 403.")
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="ORIGIN",
    help="Turn CORS on for this origin (repeatable). Off by default.",
)
@click.option(
    "--header-timeout",
    default=10.0,
    show_default=True,
    type=FiniteFloat(0.1, 3600),
    metavar="S",
    help="Close a connection that has not sent a whole request head within S seconds.",
)
@click.option(
    "--body-timeout",
    default=30.0,
    show_default=True,
    type=FiniteFloat(0.1, 3600),
    metavar="S",
    help="Answer 408 to a request whose body has not arrived within S seconds.",
)
@click.option(
    "--idle-timeout",
    default=5.0,
    show_default=True,
    type=FiniteFloat(1, 3600),
    metavar="S",
    help="Close a keep-alive connection idle for S seconds.",
)
@click.option(
    "--max-connections",
    default=1000,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    metavar="N",
    help="Answer 503 to new requests while N connections are open.",
)
@click.option(
    "--max-connections-per-peer",
    default=100,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    metavar="N",
    help="Answer 503 to, and close, a new connection from an address already holding N.",
)
@click.option(
    "--user-header",
    metavar="NAME",
    help=(
        "Trust this request header to name the board's user (set by an authenticating "
        "reverse proxy; only behind one, docs/serve.md)."
    ),
)
@pass_settings
def serve(
    settings: Settings,
    bind_host: str,
    port: int,
    token: str | None,
    read_only: bool,
    allow_origins: tuple[str, ...],
    header_timeout: float,
    body_timeout: float,
    idle_timeout: float,
    max_connections: int,
    max_connections_per_peer: int,
    user_header: str | None,
) -> None:
    """Serve the HTTP API, the event stream and the board page until SIGINT/SIGTERM."""
    from core.serve import server

    secret = _token(token)
    try:
        sock = server.bind(bind_host, port)
    except OSError as exc:
        raise LanewayError(f"cannot listen on {bind_host}:{port}: {exc.strerror or exc}") from None
    if user_header is not None and not _HEADER_OK.fullmatch(user_header):
        raise LanewayError(f"--user-header {user_header!r}: not an HTTP header name")
    if user_header is not None and user_header.lower() == "authorization":
        raise LanewayError("--user-header: must not be Authorization")
    if not server.is_loopback(bind_host):
        logger.bind(host=bind_host).warning(
            "serving beyond loopback: put a TLS reverse proxy in front (docs/serve.md)"
        )
    actual_port = sock.getsockname()[1]
    base = f"http://{server.url_host(bind_host)}:{actual_port}/"

    def announce() -> None:
        if settings.json:
            click.echo(json.dumps({"url": base, "token": secret}))
        else:
            click.echo(f"laneway serve: {base}#token={secret}")

    opened = reader(settings) if read_only else writer(settings)
    try:
        with opened as host, _scheduling(host, read_only):
            server.run(
                host,
                sock,
                token=secret,
                read_only=read_only,
                allow_origins=allow_origins,
                user_header=user_header,
                on_ready=announce,
                limits=server.Limits(
                    header_timeout=header_timeout,
                    body_timeout=body_timeout,
                    idle_timeout=idle_timeout,
                    max_connections=max_connections,
                    max_connections_per_peer=max_connections_per_peer,
                ),
            )
    finally:
        with contextlib.suppress(OSError):  # uvicorn closed it on shutdown
            sock.close()


@contextlib.contextmanager
def _scheduling(host: Host, read_only: bool) -> Iterator[None]:
    """The trigger scheduler beside the server (core.services.scheduler); none read-only."""
    if read_only:
        yield
        return
    from core.services.scheduler import Scheduler

    with Scheduler(host):
        yield


COMMANDS: tuple[click.Command, ...] = (serve,)
