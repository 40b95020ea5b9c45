"""SQLite: how soon a process learns of a new board event, against its floors (issue 45 item 3).

    python -m tests.benchmarks.bench_event_latency                 # 3 rounds of each figure
    python -m tests.benchmarks.bench_event_latency --rounds 5 --clients 100 --seconds 5

Two figures, each beside its floor measured in the same run, rounds alternating (laneway, then
the floor), so load on the machine hits both; prints min / median / max of the per-round ratio
laneway p50 / floor p50 and the 1-minute load average.

A. agent line -> `agent.item` on an event-stream client. laneway: `host.runtime.run_turn` on an
   exec agent printing `--lines` `{"log"}` lines, one every `--interval` s, each carrying the
   wall-clock time it was printed; a `laneway serve` on the board and one `GET /api/events`
   client (httpx) take the time each line's `agent.item` arrives. The floor: the same agent's
   lines read from its pipe by a bare loop (one INSERT and one COMMIT per line, raw `sqlite3`,
   WAL, `synchronous=NORMAL` as laneway sets) and a reader process polling the table every
   2 ms, which takes the time it read each row.
B. SSE lag p50 with `--clients` clients: a producer writes `--rate` events a second (a
   transaction every 20 ms, each event carrying the moment it was written) for `--seconds`;
   laneway: every event-stream client of one `laneway serve` notes each event's lag
   (`bench_serve_stream`'s clients); the floor: the same producer on a board of its own and a
   reader process polling `board_events` every 2 ms.

Bounded: fixed line counts and durations, every wait has a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from core.store import events  # noqa: E402
from tests.benchmarks import bench_serve_stream as stream  # noqa: E402
from tests.benchmarks.bench_transcripts import _chatty, _latency  # noqa: E402
from tests.conftest import open_host  # noqa: E402

POLL_S = 0.002
END = "bench.end"

# The floor's reader: a process of its own polling a table every 2 ms for rows after the last
# it read; each row carries the wall-clock time it was made. Stops at the row saying END.
_READER = f"""
import json, sqlite3, sys, time
db, query = sys.argv[1], sys.argv[2]
conn = sqlite3.connect(db, isolation_level=None)
last, lags = 0, []
for rid, _stamp in conn.execute(query, (0,)).fetchall():
    last = rid  # what an earlier round left: not this round's
print("ready", flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    rows = conn.execute(query, (last,)).fetchall()
    now = time.time()
    done = False
    for rid, stamp in rows:
        last = rid
        if stamp == {END!r}:
            done = True
        elif stamp is not None:
            lags.append(now - float(stamp))
    if done:
        break
    time.sleep({POLL_S})
print(json.dumps(lags), flush=True)
"""
_ITEMS_QUERY_END = (
    "SELECT id, CASE WHEN text = 'bench.end' THEN text "
    "ELSE substr(text, 1, instr(text, ' ') - 1) END FROM floor_items WHERE id > ? ORDER BY id"
)
_EVENTS_QUERY = (
    "SELECT id, CASE WHEN type = 'bench.end' THEN type "
    "ELSE json_extract(data, '$.bench_t') END FROM board_events WHERE id > ? ORDER BY id"
)


def _reader(db: Path, query: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _READER, str(db), query], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _lags(proc: subprocess.Popen[str]) -> list[float]:
    out, _ = proc.communicate(timeout=150)
    if proc.returncode != 0 or not out.strip():
        raise SystemExit(f"the floor's reader failed (exit {proc.returncode})")
    return [float(x) for x in json.loads(out.strip().splitlines()[-1])]


def _p50_ms(lags: list[float]) -> float:
    return statistics.median(lags) * 1000


def _sqlite(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


# -- A: agent line -> event --------------------------------------------------------------------


def floor_agent_line(tmp: Path, lines: int, interval: float) -> list[float]:
    """The paced agent's lines, each INSERTed and COMMITted as it is read from the pipe; a
    reader process polling every 2 ms times each row."""
    db = tmp / "floor-items.db"  # `tmp` is the round's own
    conn = _sqlite(db)
    conn.execute("CREATE TABLE IF NOT EXISTS floor_items (id INTEGER PRIMARY KEY, text TEXT)")
    reader = _reader(db, _ITEMS_QUERY_END)
    agent = subprocess.Popen(
        _chatty(lines, interval), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert agent.stdin is not None
    assert agent.stdout is not None
    agent.stdin.write("go\n")
    agent.stdin.close()
    for line in agent.stdout:
        text = json.loads(line)["log"]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO floor_items (text) VALUES (?)", (text,))
        conn.execute("COMMIT")
    agent.wait(30)
    conn.execute("INSERT INTO floor_items (text) VALUES (?)", (END,))
    conn.close()
    return _lags(reader)


def laneway_agent_line(db: str, tmp: Path, lines: int, interval: float) -> list[float]:
    with open_host(db) as host:
        try:
            return _latency(db, host, tmp, lines, interval)
        finally:
            host.runtime.close()


# -- B: SSE lag, many clients ------------------------------------------------------------------


def _end(db: str) -> None:
    with open_host(db) as host, host.store.transaction() as uow:
        events.record(uow, END, None)


def floor_lag(db: str, path: Path, rate: int, seconds: float) -> list[float]:
    reader = _reader(path, _EVENTS_QUERY)
    written: list[int] = []
    stream.produce(db, rate, seconds, written)
    _end(db)
    return _lags(reader)


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (Linux: /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def laneway_lag(
    db: str,
    serve: int,
    port: int,
    clients: int,
    rate: int,
    seconds: float,
    rounds: int,
    floor: Path,
) -> list[tuple[float, float, float]]:
    """Per round: (laneway p50 ms, floor p50 ms, load); clients stay connected throughout.
    Also prints, per round, serve's CPU per producer transaction (each one wake of the stream)
    and this process's (the clients' and the producer's), steadier than the lag on a loaded
    machine."""
    stop = asyncio.Event()
    followers = [stream.Client() for _ in range(clients)]
    readies = [asyncio.Event() for _ in followers]
    tasks = [
        asyncio.create_task(stream.follow(port, c, stop, r))
        for c, r in zip(followers, readies, strict=True)
    ]
    async with asyncio.timeout(60):
        for ready in readies:
            await ready.wait()
    out: list[tuple[float, float, float]] = []
    floor_db = f"sqlite:///{floor}"
    for _ in range(rounds):
        for c in followers:
            c.lags.clear()
            c.count = 0
        written: list[int] = []
        producer = threading.Thread(target=stream.produce, args=(db, rate, seconds, written))
        cpu_serve, cpu_self = _cpu_s(serve), time.process_time()
        producer.start()
        while producer.is_alive():
            await asyncio.sleep(0.2)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(c.count < written[0] for c in followers):
            await asyncio.sleep(0.1)
        commits = seconds / stream.TICK_S
        print(
            f"    serve CPU {(_cpu_s(serve) - cpu_serve) / commits * 1000:.2f} ms a commit; "
            f"clients + producer {(time.process_time() - cpu_self) / commits * 1000:.2f} ms"
        )
        lags = [lag for c in followers for lag in c.lags]
        got = sum(c.count for c in followers)
        if got != written[0] * clients:
            # the clients count event names per read, so one split between two reads is missed
            print(f"    ({got} deliveries counted of {written[0] * clients} within 30 s)")
        ours = _p50_ms(lags)
        theirs = _p50_ms(await asyncio.to_thread(floor_lag, floor_db, floor, rate, seconds))
        out.append((ours, theirs, os.getloadavg()[0]))
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return out


def _row(name: str, rounds: list[tuple[float, float, float]]) -> None:
    ratios = [ours / theirs for ours, theirs, _ in rounds]
    ours = statistics.median(r[0] for r in rounds)
    theirs = statistics.median(r[1] for r in rounds)
    loads = [r[2] for r in rounds]
    print(
        f"{name}: laneway p50 {ours:.2f} ms, floor p50 {theirs:.2f} ms; ratio "
        f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f} "
        f"(min / median / max of {len(rounds)} rounds); load {min(loads):.2f}-{max(loads):.2f}"
    )
    for n, (a, b, load) in enumerate(rounds, 1):
        print(f"    round {n}: {a:.2f} ms vs {b:.2f} ms = {a / b:.2f}x  load {load:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lines", type=int, default=150, help="agent lines per round (A)")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between lines")
    parser.add_argument("--clients", type=int, default=100, help="event-stream clients (B)")
    parser.add_argument("--rate", type=int, default=500, help="events a second (B)")
    parser.add_argument("--seconds", type=float, default=4.0, help="production per round (B)")
    parser.add_argument("--only", choices=("agent", "lag"))
    args = parser.parse_args()
    os.environ.setdefault("LANEWAY_PLUGINS_ALLOW", "kanban,office")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.only != "lag":
            rounds_a = []
            for n in range(args.rounds):
                (tmp / f"a{n}").mkdir()
                db = f"sqlite:///{tmp}/a{n}/agent.db"
                ours = laneway_agent_line(db, tmp / f"a{n}", args.lines, args.interval)
                assert len(ours) == args.lines, f"{len(ours)} of {args.lines} lines arrived"
                theirs = floor_agent_line(tmp / f"a{n}", args.lines, args.interval)
                rounds_a.append((_p50_ms(ours), _p50_ms(theirs), os.getloadavg()[0]))
            _row("A. agent line -> agent.item on an SSE client", rounds_a)
        if args.only != "agent":
            db = f"sqlite:///{tmp}/stream.db"
            floor = tmp / "floor-stream.db"
            for url in (db, f"sqlite:///{floor}"):
                subprocess.run(
                    [stream.LANEWAY, "--db", url, "init"], check=True, capture_output=True
                )
            serve, url = _serve(db)
            try:
                port = int(url.rsplit(":", 1)[1])
                rounds_b = asyncio.run(
                    laneway_lag(
                        db,
                        serve.pid,
                        port,
                        args.clients,
                        args.rate,
                        args.seconds,
                        args.rounds,
                        floor,
                    )
                )
            finally:
                serve.terminate()
                serve.wait(30)
            _row(f"B. SSE lag, {args.clients} clients / a reader polling every 2 ms", rounds_b)
    return 0


def _serve(db: str) -> tuple[subprocess.Popen[str], str]:
    """`laneway serve` with the token `bench_serve_stream`'s clients send."""
    serve = subprocess.Popen(
        [stream.LANEWAY, "--db", db, "--json", "serve", "--port", "0", "--token", stream.TOKEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert serve.stdout is not None
    return serve, json.loads(serve.stdout.readline())["url"].rstrip("/")


if __name__ == "__main__":
    raise SystemExit(main())
