"""Webhooks at speed (issue 42): what delivering costs, and what a hanging endpoint costs a
worker.

    python -m tests.benchmarks.bench_hooks [--events N] [--runs N] [--pg URL]

Not a pytest module. Two figures:

(a) deliveries/s: N events (`task.created`, default 500) taken by one hook and sent by a
    `Deliverer` (the thread every worker and writable serve runs) to a fast receiver on
    loopback (http.server answering 200 at once), from the deliverer's start to the last
    delivery recorded; beside it, a bare loop POSTing the same bodies with the same headers to
    the same receiver, one connection each, as the deliverer does (`core.services.hooks.post`),
    with no database. Their ratio is what the claim, the cursor and the recorded outcome cost.
(b) worker runs/s: N runs (default 120) of an exec agent (`/bin/true`) drained by one
    `laneway worker --once --concurrency 4` (bench_worker's board), first claim to last finish;
    then the same with a hook on every event pointing at an endpoint that accepts connections
    and never answers (each send hangs its full 10 s). The sends wait on their own threads, so
    the two rates should match.

On SQLite (a file in a temporary directory) and, with `--pg` (or LANEWAY_BENCH_PG_URL), on
PostgreSQL too (a fresh database on that server).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from core import Host  # noqa: E402
from core.services import hooks  # noqa: E402
from core.store import tables as t  # noqa: E402
from tests.benchmarks.bench_many_processes import _drop_fresh, _fresh_url  # noqa: E402
from tests.benchmarks.bench_worker import SELECTION, Board  # noqa: E402


@contextmanager
def fast_receiver() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def hanging_endpoint() -> Iterator[str]:
    """Accepts every connection and never answers (nor reads)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hang"
    finally:
        stop.set()
        thread.join(5)
        for s in held:
            s.close()
        listener.close()


def deliveries(url: str, count: int) -> tuple[float, float]:
    """(deliveries/s through a Deliverer, POSTs/s of the bare loop)."""
    with fast_receiver() as target, Host.open(url, plugins=SELECTION) as host:
        wf = host.workflows.create_from_template("simple")
        hooks.add(host.store, target, ("task.created",), "bench-secret")
        for i in range(count):
            host.tasks.create(workflow=wf.id, title=f"e{i}")
        D = t.hook_deliveries
        delivered = sa.select(sa.func.count()).where(D.c.state == "delivered")
        start = time.perf_counter()
        with hooks.Deliverer(host.store, interval=0.05):
            while True:
                with host.store.read() as conn:
                    if conn.execute(delivered).scalar_one() >= count:
                        break
                time.sleep(0.01)
        took = time.perf_counter() - start
        with host.store.read() as conn:
            sent = [
                (str(b), str(ty), int(e))
                for b, ty, e in conn.execute(sa.select(D.c.body, D.c.type, D.c.event_id))
            ]
        start = time.perf_counter()
        for body, type_, event_id in sent:
            raw = body.encode()
            headers = {
                "Content-Type": "application/json",
                "X-Laneway-Event": type_,
                "X-Laneway-Delivery": str(event_id),
                "X-Laneway-Signature": hooks.sign("bench-secret", raw),
            }
            assert hooks.post(target, raw, headers) == 200
        bare = time.perf_counter() - start
    return count / took, len(sent) / bare


def runs(url: str, count: int) -> tuple[float, float]:
    """(runs/s with no hook, runs/s with a hook on every event to a hanging endpoint)."""
    board = Board(url)
    plain = board.drain("true", count, 1, 4)
    with hanging_endpoint() as target, Host.open(url, plugins=SELECTION) as host:
        hooks.add(host.store, target, (), None)
        hanging = board.drain("true", count, 1, 4)
    return plain, hanging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--runs", type=int, default=120)
    parser.add_argument("--pg", default=os.environ.get("LANEWAY_BENCH_PG_URL", ""))
    args = parser.parse_args()
    cases = [("sqlite", None)] + ([("postgresql", args.pg)] if args.pg else [])
    try:
        for name, pg in cases:
            got, bare = deliveries(_fresh_url(name, pg), args.events)
            print(
                f"{name:10} (a) deliveries/s {got:8.1f}   bare POST loop {bare:8.1f}   "
                f"ratio {got / bare:.2f}"
            )
            plain, hanging = runs(_fresh_url(name, pg), args.runs)
            print(
                f"{name:10} (b) worker runs/s {plain:7.1f}   with a hanging endpoint "
                f"{hanging:7.1f}   ratio {hanging / plain:.2f}"
            )
    finally:
        _drop_fresh()


if __name__ == "__main__":
    main()
