"""A webhook receiver on loopback (http.server in a thread) that answers as told and keeps
every request it got."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs


@attrs.frozen
class Got:
    path: str
    headers: dict[str, str]
    body: bytes


@attrs.define
class Receiver:
    url: str
    got: list[Got] = attrs.field(factory=list)
    answer: Callable[[int], int] = lambda _n: 200
    """Status for the n-th request (0-based)."""
    hold: threading.Event | None = None
    """When set: the first request waits for it before answering."""
    first_arrived: threading.Event = attrs.field(factory=threading.Event)

    def of(self, event_id: int) -> list[Got]:
        return [g for g in self.got if g.headers["x-laneway-delivery"] == str(event_id)]


@contextmanager
def receiver(answer: Callable[[int], int] = lambda _n: 200) -> Iterator[Receiver]:
    lock = threading.Lock()
    box: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            if len(body) < length:
                # The sender died mid-request (a test's kill -9): no hook server would act on
                # half a body, and the delivery is sent again whole.
                self.close_connection = True
                return
            rec = box["r"]
            with lock:
                n = len(rec.got)
                rec.got.append(
                    Got(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
            if n == 0:
                rec.first_arrived.set()
                if rec.hold is not None:
                    rec.hold.wait(60)
            status = rec.answer(n)
            try:
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender was killed while we answered; it sends again

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    box["r"] = Receiver(f"http://127.0.0.1:{server.server_address[1]}/hook", answer=answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box["r"]
    finally:
        server.shutdown()
        server.server_close()
