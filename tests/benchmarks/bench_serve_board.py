"""`GET /api/board` at board scale (issue 28): 1,000 / 10,000 / 100,000 tasks, both databases.

    python tests/benchmarks/bench_serve_board.py [--sizes 1000,10000,100000] [--pg URL]
        [--pg-sizes 1000,10000] [--repeat 3]

Not a pytest module. For each size, on a fresh board (Office Default with the demo's seats):
the tasks are written straight into the table (the services would take minutes at 100k), a
tenth of them with the rows that light a badge (a session, a queued or failed run, a pending
permission, a decision), spread over every step. Then, in the same run:

- **bare SELECT**: `SELECT * FROM tasks WHERE workflow_id = ?` fetched whole, the least a
  board answer can cost;
- **read model**: `core.serve.board_view.read` in this process, the statements and the cards;
- **GET /api/board**: the whole answer from a real `laneway serve` over loopback (the read
  model, the JSON encoding, the transfer, the client's parse), best of `--repeat`;
- **first page**: `?limit=200` of one lane, what a page shows first;
- **small reads p99**: 100 small reads back to back, alone and just after a whole-board call
  whose client hung up at once (serve stops reading for it at its next statement).

Prints, per size, each time, the cost per task (µs) and the board's ratio to the bare SELECT;
the issue's targets: 10,000 tasks under 1 s on both databases, a flat cost per task. The
PostgreSQL sizes default to 1,000 and 10,000 (generating 100,000 rows there is slow on a shared
machine; pass `--pg-sizes` to include it). `--pg` defaults to `LANEWAY_TEST_PG_URL`; a database
of its own is made there and dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from core import ids  # noqa: E402
from core.host import Host  # noqa: E402
from core.serve import board_view  # noqa: E402
from core.store import tables as t  # noqa: E402

LANEWAY = str(Path(sys.executable).with_name("laneway"))
TOKEN = "bench-board-token-0123456789"
CHUNK = 5000


def _open(url: str) -> Host:
    from tests.conftest import open_host

    return open_host(url)


def populate(host: Host, tasks: int, state_dir: Path) -> str:
    """An Office Default board with `tasks` tasks; its workflow's name."""
    from office_plugin import demo

    built = demo.build_board(host, state_dir)
    wf = built.workflow
    first = host.tasks.get(built.task_id)
    agent = host.profiles.list()[0].id
    seats = {s.id: host.participants.list(step=s.id, workflow=wf.id) for s in wf.steps}
    steps = [s.id for s in wf.steps]
    base = ids.now_micros()
    task_rows: list[dict[str, Any]] = []
    sessions: list[dict[str, Any]] = []
    run_rows: list[dict[str, Any]] = []
    perms: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    for n in range(tasks - 1):
        stamp = ids.at_micros(base + n)
        task_id = ids.new_id()
        step = steps[n % len(steps)]
        task_rows.append(
            {
                "id": task_id,
                "workspace_id": first.workspace_id,
                "workflow_id": wf.id,
                "workflow_step_id": step,
                "title": f"Task {n}: rotate the keys of service {n % 97}",
                "description": "A card of the benchmark board." if n % 3 else "",
                "state": "TODO",
                "created_at": stamp,
                "updated_at": stamp,
            }
        )
        if n % 10 == 0:
            sessions.append(
                {
                    "id": ids.new_id(),
                    "task_id": task_id,
                    "agent_profile_id": agent,
                    "state": ("RUNNING", "FAILED", "WAITING_FOR_INPUT")[n % 3],
                    "metadata": "{}",
                    "started_at": stamp,
                    "updated_at": stamp,
                    "agent": "{}",
                }
            )
            status = ("queued", "failed", "finished", "dead")[(n // 10) % 4]
            run_rows.append(
                {
                    "id": ids.new_id(),
                    "agent_profile_id": agent,
                    "task_id": task_id,
                    "reason": "bench",
                    "status": status,
                    "requested_at": stamp,
                    "error_message": "the agent ran out of time" if status == "failed" else None,
                }
            )
        if n % 20 == 0:
            perms.append(
                {
                    "id": ids.new_id(),
                    "task_id": task_id,
                    "session_id": sessions[-1]["id"],
                    "state": "pending",
                    "created_at": stamp,
                }
            )
        if seats[step] and n % 5 == 0:
            seat = seats[step][0]
            decisions.append(
                {
                    "id": ids.new_id(),
                    "task_id": task_id,
                    "step_id": step,
                    "participant_id": seat.id,
                    "decision": "approved",
                    "decided_at": stamp,
                }
            )
    with host.store.transaction() as uow:
        for table, batch in (
            (t.tasks, task_rows),
            (t.task_sessions, sessions),
            (t.runs, run_rows),
            (t.permissions, perms),
            (t.workflow_step_decisions, decisions),
        ):
            for at in range(0, len(batch), CHUNK):
                uow.conn.execute(sa.insert(table), batch[at : at + CHUNK])
    return wf.name


def best(repeat: int, work: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(url: str, tasks: int, repeat: int, state_dir: Path) -> dict[str, float]:
    with _open(url) as host:
        started = time.perf_counter()
        name = populate(host, tasks, state_dir)
        generated = time.perf_counter() - started
        wf = host.workflows.get(name)
        lane = wf.steps[0].name

        def bare() -> None:
            with host.store.read() as conn:
                conn.execute(sa.select(t.tasks).where(t.tasks.c.workflow_id == wf.id)).all()

        def model() -> None:
            with host.store.read() as conn:
                board_view.read(conn, wf, board_view.BoardQuery(), lambda: None)

        bare()
        figures = {"generate": generated, "bare": best(repeat, bare), "model": best(repeat, model)}
    serve = subprocess.Popen(
        [LANEWAY, "--db", url, "--json", "serve", "--port", "0", "--token", TOKEN],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        base = json.loads(serve.stdout.readline())["url"].rstrip("/")
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=base, headers=auth, timeout=120) as client:

            def whole() -> None:
                answer = client.get("/api/board", params={"workflow": name})
                assert answer.status_code == 200, answer.text
                assert len(answer.json()["tasks"]) == tasks

            def first_page() -> None:
                params = {"workflow": name, "step": lane, "limit": "200"}
                answer = client.get("/api/board", params=params)
                assert answer.status_code == 200, answer.text

            figures["board"] = best(repeat, whole)
            figures["page"] = best(repeat, first_page)
            figures["calm_p99"] = flood_p99(client, wf.id)
            abandon(base, name)
            figures["abandoned_p99"] = flood_p99(client, wf.id)
    finally:
        serve.terminate()
        serve.wait(30)
    return figures


def abandon(base: str, workflow: str) -> None:
    """Ask for the whole board and hang up at once: serve should stop working on it."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"GET /api/board?workflow={quote(workflow)} HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
    time.sleep(0.05)  # the request reached the route; the client is gone


def flood_p99(client: httpx.Client, workflow_id: str, requests: int = 100) -> float:
    """p99 of small reads sent back to back (`GET /api/info`, a lane's first 20 cards)."""
    times = []
    for n in range(requests):
        started = time.perf_counter()
        if n % 2:
            answer = client.get("/api/info")
        else:
            answer = client.get("/api/board", params={"workflow": workflow_id, "limit": "20"})
        assert answer.status_code == 200, answer.text
        times.append(time.perf_counter() - started)
    return sorted(times)[int(len(times) * 0.99) - 1]


def report(db: str, tasks: int, got: dict[str, float]) -> None:
    per = got["board"] / tasks * 1e6
    print(
        f"{db:10} {tasks:>7} tasks: bare SELECT {got['bare'] * 1000:8.1f} ms "
        f"({got['bare'] / tasks * 1e6:5.1f} µs/task) | read model {got['model'] * 1000:8.1f} ms "
        f"({got['model'] / got['bare']:4.1f}x bare) | GET /api/board {got['board'] * 1000:8.1f} ms "
        f"({per:5.1f} µs/task, {got['board'] / got['bare']:4.1f}x bare) | "
        f"first lane page (200) {got['page'] * 1000:6.1f} ms | "
        f"generated in {got['generate']:.1f} s | small reads p99 {got['calm_p99'] * 1000:.0f} ms, "
        f"with an abandoned whole-board call {got['abandoned_p99'] * 1000:.0f} ms",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--pg", default=os.environ.get("LANEWAY_TEST_PG_URL"))
    parser.add_argument("--pg-sizes", default="1000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("LANEWAY_PLUGINS_ALLOW", "kanban,office")
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        for size in [int(s) for s in args.sizes.split(",") if s]:
            url = f"sqlite:///{scratch}/board-{size}.db"
            got = measure(url, size, args.repeat, Path(scratch) / f"agents-{size}")
            report("sqlite", size, got)
            failed |= size == 10_000 and got["board"] >= 1.0
        if args.pg:
            admin = sa.create_engine(args.pg, isolation_level="AUTOCOMMIT")
            name = f"laneway_bench_board_{os.getpid()}"
            url = args.pg.rsplit("/", 1)[0] + f"/{name}"
            for size in [int(s) for s in args.pg_sizes.split(",") if s]:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                    conn.exec_driver_sql(f"CREATE DATABASE {name}")
                try:
                    got = measure(url, size, args.repeat, Path(scratch) / f"pg-agents-{size}")
                finally:
                    with admin.connect() as conn:
                        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                report("postgresql", size, got)
                failed |= size == 10_000 and got["board"] >= 1.0
            admin.dispose()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
