"""Load on `laneway serve`: event-stream clients and a steady request rate, on loopback.

    python tests/benchmarks/bench_serve_load.py [--clients 50] [--rate 200] [--seconds 30]

Not a pytest module (its name does not start with `test_`); `tests/serve/test_serve_load.py`
runs a short version in CI. On a fresh SQLite board (Office Default, `--tasks` tasks):

1. starts `laneway serve` (the installed script, a process of its own) and connects
   `--clients` event-stream clients;
2. sends `--rate` API requests per second for `--seconds` seconds, open loop (each request
   leaves at its scheduled time, at most `--inflight` at once): one in ten a manual move
   (`POST /api/tasks/T/move`, tasks alternating Backlog <-> Work), the rest reads
   (`GET /api/tasks/T`, `GET /api/runs?task=T`); a latency is from sending the request to
   reading the whole answer, on `--inflight` keep-alive connections;
3. waits until every client has the last event the board stored, then checks that each one
   received every event stored after it connected, once and in id order (no lost event);
4. stops `serve` (SIGTERM; it must exit 0) and makes the same number of moves through
   `core.Host` in this process, for the comparison.

Prints p50/p99 latency of a move through the API and through `core.Host`, of the reads, the
rate achieved and the error count. Everything is bounded: a fixed number of requests, clients
and seconds, and every wait has a deadline. Exits 1 when a request failed or an event was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import attrs

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

LANEWAY = str(Path(sys.executable).with_name("laneway"))
TOKEN = "load-test-token-0123456789"
STEPS = ("Backlog", "Work")


@attrs.frozen
class LoadReport:
    clients: int
    seconds: float
    requests: int
    achieved_rate: float
    errors: int
    error_samples: tuple[str, ...]
    events_stored: int
    lost: int
    duplicated_or_out_of_order: int
    api_move_ms: tuple[float, float]
    host_move_ms: tuple[float, float]
    read_ms: tuple[float, float]
    moves: int
    serve_exit: int

    def lines(self) -> list[str]:
        return [
            (
                f"clients {self.clients}, {self.requests} requests in {self.seconds:.1f} s "
                f"({self.achieved_rate:.0f}/s), errors {self.errors}"
            ),
            (
                f"events stored {self.events_stored}; lost {self.lost}, "
                f"duplicated/out of order {self.duplicated_or_out_of_order} (summed over clients)"
            ),
            (
                f"move via API   p50 {self.api_move_ms[0]:7.2f} ms  "
                f"p99 {self.api_move_ms[1]:7.2f} ms  ({self.moves} moves)"
            ),
            (
                f"move via Host  p50 {self.host_move_ms[0]:7.2f} ms  "
                f"p99 {self.host_move_ms[1]:7.2f} ms"
            ),
            f"reads via API  p50 {self.read_ms[0]:7.2f} ms  p99 {self.read_ms[1]:7.2f} ms",
            f"serve exit code {self.serve_exit}",
        ]

    @property
    def ok(self) -> bool:
        return (
            self.errors == 0
            and self.lost == 0
            and self.duplicated_or_out_of_order == 0
            and self.serve_exit == 0
        )


def _pct(values: list[float]) -> tuple[float, float]:
    if not values:
        return (0.0, 0.0)
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (statistics.median(ordered), p99)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEWAY_")}
    env["LANEWAY_PLUGINS_ALLOW"] = "kanban,office"
    return env


def _board(db: str, tasks: int) -> tuple[str, list[str]]:
    from core import Features, Host
    from core.plugin.selection import PluginSelection

    selection = PluginSelection(allow=frozenset({"kanban", "office"}))
    with Host.open(db, features=Features(office=True), plugins=selection) as host:
        wf = host.workflows.create_from_template("office-default", name="Load")
        made = [host.tasks.create(workflow=wf.id, title=f"load {n}").id for n in range(tasks)]
        for task_id in made:
            host.tasks.move(task_id, STEPS[0])
    return wf.id, made


def _start_serve(db: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [LANEWAY, "--db", db, "--json", "serve", "--port", "0", "--token", TOKEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    assert proc.stdout is not None
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(60)
    if not line or not line[0].strip():
        proc.kill()
        raise SystemExit("laneway serve did not start")
    return proc, json.loads(line[0])["url"].rstrip("/")


class _Client:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.connected = asyncio.Event()


# The load is made with plain asyncio streams speaking HTTP/1.1, not an HTTP library: on a
# small machine a client library's own CPU cost would be what the benchmark measures.


def _address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").partition(":")
    return host, int(port)


async def _listen(url: str, client: _Client) -> None:
    host, port = _address(url)
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET /api/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"event stream refused: {status!r}")
    client.connected.set()
    try:
        while line := await reader.readline():
            if line.startswith(b"id: "):
                client.ids.append(int(line[4:]))
    finally:
        writer.close()


class _Connection:
    """One keep-alive HTTP/1.1 connection: a request, then its whole response."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n"
            "Content-Type: application/json\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _load(
    url: str, tasks: list[str], *, clients: int, rate: int, seconds: float, inflight: int
) -> dict[str, Any]:
    listeners = [_Client() for _ in range(clients)]
    streams = [asyncio.create_task(_listen(url, c)) for c in listeners]
    await asyncio.wait_for(asyncio.gather(*(c.connected.wait() for c in listeners)), 60)
    moves: list[float] = []
    reads: list[float] = []
    errors: list[str] = []
    place = dict.fromkeys(tasks, 0)
    total = int(rate * seconds)
    jobs: asyncio.Queue[int | None] = asyncio.Queue()
    host, port = _address(url)

    async def worker() -> None:
        conn = _Connection(host, port)
        try:
            while (n := await jobs.get()) is not None:
                task = tasks[n % len(tasks)]
                if n % 10 == 0:
                    task = tasks[(n // 10) % len(tasks)]
                    place[task] ^= 1
                    body = json.dumps({"step": STEPS[place[task]]}).encode()
                    method, path, bucket = "POST", f"/api/tasks/{task}/move", moves
                elif n % 2:
                    method, path, body, bucket = "GET", f"/api/tasks/{task}", b"", reads
                else:
                    method, path, body, bucket = "GET", f"/api/runs?task={task}", b"", reads
                started = time.perf_counter()
                try:
                    status, answer = await asyncio.wait_for(conn.request(method, path, body), 30)
                except (OSError, TimeoutError, ValueError, IndexError) as exc:
                    errors.append(f"{method} {path}: {type(exc).__name__}: {exc}")
                    conn.close()
                    conn = _Connection(host, port)
                    continue
                if status >= 400:
                    errors.append(f"{method} {path}: {status} {answer[:200]!r}")
                else:
                    bucket.append((time.perf_counter() - started) * 1000)
        finally:
            conn.close()

    workers = [asyncio.create_task(worker()) for _ in range(inflight)]
    began = time.perf_counter()
    for n in range(total):
        delay = began + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        jobs.put_nowait(n)
    for _ in workers:
        jobs.put_nowait(None)
    await asyncio.wait_for(asyncio.gather(*workers), 120)
    took = time.perf_counter() - began
    return {
        "listeners": listeners,
        "streams": streams,
        "moves": moves,
        "reads": reads,
        "errors": errors,
        "took": took,
        "total": total,
    }


def run_load(
    *,
    clients: int = 50,
    rate: int = 200,
    seconds: float = 30.0,
    tasks: int = 50,
    inflight: int = 32,
    workdir: Path | None = None,
) -> LoadReport:
    from core import Features, Host
    from core.plugin.selection import PluginSelection
    from core.store import events

    base = Path(workdir or tempfile.mkdtemp(prefix="laneway-load-"))
    db = f"sqlite:///{base / 'load.db'}"
    subprocess.run([LANEWAY, "--db", db, "init"], check=True, env=_env(), capture_output=True)
    _wf, made = _board(db, tasks)
    proc, url = _start_serve(db)
    try:

        async def drive() -> tuple[dict[str, Any], list[events.Event]]:
            result = await _load(
                url, made, clients=clients, rate=rate, seconds=seconds, inflight=inflight
            )
            from core.store.database import Store

            store = Store(db)
            try:
                stored = events.read_all(store)
            finally:
                store.close()
            last = stored[-1].id if stored else 0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                (c.ids[-1] if c.ids else 0) < last for c in result["listeners"]
            ):
                await asyncio.sleep(0.05)
            for stream in result["streams"]:
                stream.cancel()
            await asyncio.gather(*result["streams"], return_exceptions=True)
            return result, stored

        result, stored = asyncio.run(drive())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            serve_exit = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            serve_exit = -9
    first_client_id = min((c.ids[0] for c in result["listeners"] if c.ids), default=0)
    expected = [e.id for e in stored if e.id >= first_client_id]
    lost = disorder = 0
    for client in result["listeners"]:
        got = client.ids
        disorder += sum(1 for a, b in itertools.pairwise(got) if b <= a)
        lost += len(set(expected) - set(got))

    # the same moves through core.Host, in this process, after serve has stopped
    host_moves: list[float] = []
    selection = PluginSelection(allow=frozenset({"kanban", "office"}))
    with Host.open(db, features=Features(office=True), plugins=selection) as host:
        where = {t: host.tasks.get(t).workflow_step_id for t in made}
        wf = host.tasks.get(made[0]).workflow_id
        assert wf is not None
        steps = {s.name: s.id for s in host.workflows.by_id(wf).steps}
        for n in range(max(len(result["moves"]), 1)):
            task = made[n % len(made)]
            target = STEPS[1] if where[task] == steps[STEPS[0]] else STEPS[0]
            started = time.perf_counter()
            host.tasks.move(task, target)
            host_moves.append((time.perf_counter() - started) * 1000)
            where[task] = steps[target]
    return LoadReport(
        clients=clients,
        seconds=result["took"],
        requests=result["total"],
        achieved_rate=result["total"] / result["took"],
        errors=len(result["errors"]),
        error_samples=tuple(result["errors"][:5]),
        events_stored=len(expected),
        lost=lost,
        duplicated_or_out_of_order=disorder,
        api_move_ms=_pct(result["moves"]),
        host_move_ms=_pct(host_moves),
        read_ms=_pct(result["reads"]),
        moves=len(result["moves"]),
        serve_exit=serve_exit,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rate", type=int, default=200, help="API requests per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--inflight", type=int, default=32, help="connections (requests in flight)")
    args = parser.parse_args()
    report = run_load(
        clients=args.clients,
        rate=args.rate,
        seconds=args.seconds,
        tasks=args.tasks,
        inflight=args.inflight,
    )
    for line in report.lines():
        print(line)
    for sample in report.error_samples:
        print(f"  error: {sample}")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
