"""Transcript items a worker keeps while a chatty agent streams, and how soon a listening client
sees each line (issue 22).

    python -m tests.benchmarks.bench_transcripts                     # SQLite
    python -m tests.benchmarks.bench_transcripts --pg URL            # PostgreSQL too
    python -m tests.benchmarks.bench_transcripts --lines 5000 --latency-lines 400

1. Items per second: `host.runtime.run_turn` on an exec agent that prints `--lines` `{"log"}`
   lines as fast as it can (the path a `laneway worker` runs: each line is a transcript item and
   an `agent.item` event, kept as it arrives). The baseline, in the same run and on the same
   database, is a bare loop writing the same rows to `transcript_items`: one INSERT and one
   COMMIT per row on the driver's own connection (a line must be durable when it arrives, so a
   commit per line is the floor's shape too). The ratio is laneway's rate over the baseline's.
2. Latency: a `laneway serve` process on the same board and one event-stream client
   (`GET /api/events`). The agent prints a line every `--interval` seconds carrying the
   wall-clock time it was printed; the client takes the time it read the `agent.item` event for
   it. Prints p50/p99/max of the difference (one machine, one clock).

Bounded: fixed line counts, and every wait has a deadline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import sqlalchemy as sa

from core import ids
from core.host import Host
from core.store import tables as t
from tests.benchmarks.bench_acp_turns import _session
from tests.benchmarks.bench_serve_load import TOKEN
from tests.benchmarks.bench_serve_load import _start_serve as _serve
from tests.conftest import open_host


def _chatty(lines: int, interval: float) -> list[str]:
    code = (
        "import json, sys, time\n"
        "sys.stdin.read()\n"
        f"for n in range({lines}):\n"
        "    print(json.dumps({'log': f'{time.time():.6f} line {n}'}), flush=True)\n"
        f"    if {interval}: time.sleep({interval})\n"
    )
    return [sys.executable, "-c", code]


def _count(host: Host, session: str) -> int:
    with host.store.read() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(t.transcript_items.c.session_id == session)
            ).scalar_one()
        )


def _laneway_rate(host: Host, session: str, lines: int) -> float:
    before = _count(host, session)
    began = time.perf_counter()
    outcome = host.runtime.run_turn(session, "talk")
    elapsed = time.perf_counter() - began
    assert outcome.ok, outcome
    kept = _count(host, session) - before
    assert kept >= lines, f"kept {kept} of {lines} lines"
    return kept / elapsed


def _bare_rate(host: Host, session: str, lines: int) -> float:
    """One INSERT and one COMMIT per row on the raw DBAPI connection, seqs counted here."""
    seq = 10_000_000
    sql = (
        "INSERT INTO transcript_items (session_id, seq, run_id, kind, text, data, at) "
        "VALUES (%s, %s, NULL, 'log', %s, '{}', %s)"
    )
    raw = host.store.engine.raw_connection()
    try:
        dialect = host.store.engine.dialect.name
        if dialect == "sqlite":
            sql = sql.replace("%s", "?")
        cursor = raw.cursor()
        began = time.perf_counter()
        for n in range(lines):
            seq += 1
            cursor.execute(sql, (session, seq, f"{time.time():.6f} line {n}", ids.now()))
            raw.commit()
        elapsed = time.perf_counter() - began
        cursor.close()
    finally:
        raw.close()
    return lines / elapsed


def _listen(url: str, session: str, want: int, seen: list[float], ready: threading.Event) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream"}
    with (
        httpx.Client(timeout=httpx.Timeout(60.0, connect=10.0)) as client,
        client.stream("GET", f"{url}/api/events", headers=headers) as answer,
    ):
        ready.set()
        kind = ""
        for line in answer.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind == "agent.item":
                data = json.loads(line.split(":", 1)[1])
                text = str(data.get("text", ""))
                if data.get("session_id") == session and text.endswith(tuple("0123456789")):
                    head = text.split(" ", 1)[0]
                    try:
                        seen.append(time.time() - float(head))
                    except ValueError:
                        continue  # the prompt item
                    if len(seen) >= want:
                        return


def _latency(db: str, host: Host, tmp: Path, lines: int, interval: float) -> list[float]:
    session = _session(host, tmp, "paced", command=_chatty(lines, interval))
    proc, url = _serve(db)
    seen: list[float] = []
    ready = threading.Event()
    client = threading.Thread(target=_listen, args=(url, session, lines, seen, ready), daemon=True)
    try:
        client.start()
        if not ready.wait(30):
            raise SystemExit("the event stream did not open")
        time.sleep(0.5)  # the stream's first poll: lines before it would count its start-up
        outcome = host.runtime.run_turn(session, "talk slowly")
        assert outcome.ok, outcome
        client.join(30)
    finally:
        proc.terminate()
        proc.wait(30)
    return seen


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench(db: str, tmp: Path, lines: int, latency_lines: int, interval: float) -> None:
    with open_host(db) as host:
        fast = _session(host, tmp, "chatty", command=_chatty(lines, 0))
        host.runtime.run_turn(fast, "warm up")
        laneway = _laneway_rate(host, fast, lines)
        bare = _bare_rate(host, fast, lines)
        print(
            f"  items/s  laneway worker {laneway:8.0f}   bare INSERT+COMMIT loop {bare:8.0f}   "
            f"ratio {laneway / bare:.2f}  ({lines} items)"
        )
        seen = _latency(db, host, tmp, latency_lines, interval)
        host.runtime.close()
    if len(seen) < latency_lines:
        print(f"  latency: only {len(seen)} of {latency_lines} lines reached the client")
    if seen:
        ms = [s * 1000 for s in seen]
        print(
            f"  agent line -> agent.item on an event-stream client: "
            f"p50 {statistics.median(ms):6.1f} ms  p99 {_pct(ms, 0.99):6.1f} ms  "
            f"max {max(ms):6.1f} ms  ({len(ms)} lines, one every {interval * 1000:.0f} ms)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000, help="lines for the items/s figure")
    parser.add_argument("--latency-lines", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between lines")
    parser.add_argument("--pg", help="a PostgreSQL URL (an empty database) to measure too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        print("SQLite")
        bench(f"sqlite:///{tmp}/board.db", tmp, args.lines, args.latency_lines, args.interval)
        if args.pg:
            print("PostgreSQL")
            (tmp / "pg").mkdir()
            bench(args.pg, tmp / "pg", args.lines, args.latency_lines, args.interval)


if __name__ == "__main__":
    main()
