"""Issue 45 item 2: transcript items written in batches against a batched bare INSERT loop.

    python tests/benchmarks/bench_transcript_batches.py [--items 20000] [--rounds 5] [--pg URL]
    PYTHONPATH=/path/to/older/checkout python tests/benchmarks/bench_transcript_batches.py

Not a pytest module (run it by path: with PYTHONPATH naming another checkout, that checkout's
`core` is the one timed, for a before/after from the same machine). Each round, on one SQLite
file (and PostgreSQL with `--pg`):

- **laneway**: `host.sessions.append_items` with `--items` items, alternating `message` and
  `thought`, in batches of 500 (what the item writer, core.agents.item_queue, hands it: one
  transaction a batch, each item a row and an `agent.item` event);
- **floor**: a bare loop on the driver's own connection writing the same rows, one INSERT
  statement a row, 500 rows a transaction, seqs counted in the loop.

Prints items/s min/median/max of both and of the ratio laneway/floor over the rounds (each
round runs both back to back), with the load average, and the ratio of their rates per second
of this process's CPU (steadier on a loaded machine). Target: ratio >= 0.5 on SQLite.

Then the pipe (`--lines`, 0 to skip): an exec agent that prints `--lines` `{"log"}` lines as
fast as it can and times its own writing (first line to last, flushed each), each round twice
back to back:

- **bare reader**: the same agent, its stdout read and dropped by a thread of this process
  (the least a reader can slow it: a pipe drained as fast as it fills);
- **through laneway**: `host.runtime.run_turn` on it (each line a transcript item and an
  `agent.item` event, written in batches by core.agents.item_queue).

Prints the agent's writing time min/median/max on each and the ratio laneway/bare. Target: the
agent slowed by at most 1.2x (median ratio <= 1.2).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from core import ids
from core.host import Host
from core.store import tables as t

BATCH = 500
TARGET = 0.5
PIPE_TARGET = 1.2
SQL = (
    "INSERT INTO transcript_items (session_id, seq, run_id, kind, text, data, at) "
    "VALUES (%s, %s, NULL, %s, %s, %s, %s)"
)


def _session(host: Host, tmp: Path) -> str:
    workflow = tmp / "plain.yml"
    workflow.write_text(
        "id: plain\nname: Plain\nsteps:\n  - id: todo\n    name: Todo\n    position: 0\n"
        "    is_start_step: true\n"
    )
    host.workflows.import_file(workflow)
    wf = host.workflows.list()[0]
    host.profiles.add("talker", command=["true"])
    task = host.tasks.create(workflow=wf.id, title="talker")
    return host.sessions.start(task.id, profile="talker", external=False).id


def _items(n: int, round_: int) -> list[tuple[str, str, dict[str, int]]]:
    kinds = ("message", "thought")
    return [(kinds[i % 2], f"round {round_} item {i}: some words", {"i": i}) for i in range(n)]


CPU: list[tuple[float, float]] = []
"""Each timed side's items per second of this process's CPU (laneway, floor), a round each:
on a loaded machine the wall time is mostly waiting for a core; the CPU is what it costs."""


def _laneway(host: Host, session: str, items: list[tuple[str, str, dict[str, int]]]) -> float:
    began, cpu = time.perf_counter(), time.process_time()
    for at in range(0, len(items), BATCH):
        host.sessions.append_items(session, items[at : at + BATCH])
    CPU.append((len(items) / (time.process_time() - cpu), 0.0))
    return len(items) / (time.perf_counter() - began)


def _floor(host: Host, session: str, items: list[tuple[str, str, dict[str, int]]]) -> float:
    import json

    with host.store.read() as conn:
        seq = int(
            conn.execute(
                sa.select(sa.func.coalesce(sa.func.max(t.transcript_items.c.seq), 0)).where(
                    t.transcript_items.c.session_id == session
                )
            ).scalar_one()
        )
    sql = SQL.replace("%s", "?") if host.store.is_sqlite else SQL
    raw = host.store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        # laneway's SQLite connections leave transactions to it (autocommit at the driver):
        # the loop opens and commits each 500 itself, as a batched writer would
        sqlite = host.store.is_sqlite
        began, cpu = time.perf_counter(), time.process_time()
        for at in range(0, len(items), BATCH):
            if sqlite:
                cursor.execute("BEGIN IMMEDIATE")
            for kind, text, data in items[at : at + BATCH]:
                seq += 1
                cursor.execute(sql, (session, seq, kind, text, json.dumps(data), ids.now()))
            if sqlite:
                cursor.execute("COMMIT")
            else:
                raw.commit()
        elapsed = time.perf_counter() - began
        CPU[-1] = (CPU[-1][0], len(items) / (time.process_time() - cpu))
        cursor.close()
    finally:
        raw.close()
    return len(items) / elapsed


def _agent(lines: int, report: Path) -> list[str]:
    """An agent printing `lines` lines as fast as it can, its own writing time in `report`."""
    code = (
        "import json, sys, time\n"
        "sys.stdin.read()\n"
        "began, cpu = time.perf_counter(), time.process_time()\n"
        f"for n in range({lines}):\n"
        "    print(json.dumps({'log': f'line {n} of a chatty agent'}), flush=True)\n"
        f"open({str(report)!r}, 'w').write("
        "f'{time.perf_counter() - began} {time.process_time() - cpu}')\n"
    )
    return [sys.executable, "-c", code]


def _bare_pipe(argv: list[str], report: Path) -> float:
    import subprocess
    import threading

    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None
    assert child.stdout is not None
    out = child.stdout

    def drain() -> None:
        while out.read(65536):
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    child.stdin.write(b"talk\n")
    child.stdin.close()
    reader.join(300)
    assert child.wait(300) == 0
    return _report(report)


def _report(report: Path) -> float:
    """The agent's writing time; its time blocked (wall less its CPU) goes to BLOCKED."""
    wall, cpu = (float(v) for v in report.read_text().split())
    BLOCKED.append(max(0.0, wall - cpu))
    return wall


BLOCKED: list[float] = []


def pipe(url: str, tmp: Path, lines: int, rounds: int) -> bool:
    """The agent's writing time through laneway against a bare reader (see the docstring)."""
    from tests.benchmarks.bench_acp_turns import _session as _agent_session
    from tests.conftest import open_host

    report = tmp / "agent-seconds"
    argv = _agent(lines, report)
    bare: list[float] = []
    ours: list[float] = []
    with open_host(url) as host:
        session = _agent_session(host, tmp / "pipe", "streamer", command=argv)
        assert host.runtime.run_turn(session, "warm up").ok
        BLOCKED.clear()
        worker_cpu: list[float] = []
        for _round in range(rounds):
            bare.append(_bare_pipe(argv, report))
            cpu = time.process_time()
            outcome = host.runtime.run_turn(session, "talk")
            worker_cpu.append(time.process_time() - cpu)
            assert outcome.ok, outcome
            ours.append(_report(report))
        host.runtime.close()
    ratios = [a / b for a, b in zip(ours, bare, strict=True)]
    bare_blocked, ours_blocked = BLOCKED[0::2], BLOCKED[1::2]
    print(
        f"\npipe: an agent printing {lines:,} lines, {rounds} rounds, load {os.getloadavg()[0]:.1f}"
    )
    print(f"  agent's writing, bare reader (ms)   {_spread([v * 1000 for v in bare], ',.0f')}")
    print(f"  agent's writing, laneway (ms)       {_spread([v * 1000 for v in ours], ',.0f')}")
    print(f"  ratio laneway / bare                {_spread(ratios, '.2f')}")
    print(
        "  agent's time not on a CPU (ms): bare "
        f"{_spread([v * 1000 for v in bare_blocked], ',.0f')}, laneway "
        f"{_spread([v * 1000 for v in ours_blocked], ',.0f')}"
    )
    print(
        "  laneway's CPU per agent line (us)   "
        f"{_spread([v / lines * 1e6 for v in worker_cpu], '.1f')}"
    )
    ok = statistics.median(ratios) <= PIPE_TARGET
    print(f"  target: the agent slowed <= {PIPE_TARGET}x: {'PASS' if ok else 'FAIL'}")
    return ok


def _spread(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def bench(db: str, url: str, tmp: Path, count: int, rounds: int) -> bool:
    from tests.conftest import open_host

    ours: list[float] = []
    floor: list[float] = []
    with open_host(url) as host:
        session = _session(host, tmp)
        _laneway(host, session, _items(BATCH, -1))  # statements prepared, caches warm
        CPU.clear()
        for n in range(rounds):
            ours.append(_laneway(host, session, _items(count, n)))
            floor.append(_floor(host, session, _items(count, n)))
    ratios = [a / b for a, b in zip(ours, floor, strict=True)]
    print(f"\n{db}: {count:,} items a round, {rounds} rounds, load {os.getloadavg()[0]:.1f}")
    print(f"  laneway append_items (500 a batch)  {_spread(ours, ',.0f')} items/s")
    print(f"  floor: bare INSERT loop, 500 a tx   {_spread(floor, ',.0f')} items/s")
    print(f"  ratio laneway / floor               {_spread(ratios, '.2f')}")
    by_cpu = [ours_cpu / floor_cpu for ours_cpu, floor_cpu in CPU]
    print(f"  the same per second of CPU          {_spread(by_cpu, '.2f')}")
    return statistics.median(ratios) >= TARGET


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pg", help="a PostgreSQL server URL: a database of its own is made")
    parser.add_argument(
        "--lines", type=int, default=20_000, help="the pipe figure's lines (0: skip it)"
    )
    args = parser.parse_args()
    import core

    print(f"issue 45 item 2, core from {Path(core.__file__).parent}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as scratch:
        ok = bench("sqlite", f"sqlite:///{scratch}/t.db", Path(scratch), args.items, args.rounds)
        print(f"  target: ratio >= {TARGET} on SQLite: {'PASS' if ok else 'FAIL'}")
        if args.lines:
            (Path(scratch) / "pipe").mkdir()
            ok &= pipe(f"sqlite:///{scratch}/pipe.db", Path(scratch), args.lines, args.rounds)
        if args.pg:
            admin = sa.create_engine(
                args.pg.replace("postgresql://", "postgresql+psycopg://", 1),
                isolation_level="AUTOCOMMIT",
            )
            name = f"laneway_bench_items_{os.getpid()}"
            with admin.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
            try:
                pg_tmp = Path(scratch) / "pg"
                pg_tmp.mkdir()
                url = args.pg.rsplit("/", 1)[0] + f"/{name}"
                bench("postgresql", url, pg_tmp, args.items, args.rounds)
            finally:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                admin.dispose()
    return 0 if ok else 1


if __name__ == "__main__":
    # after PYTHONPATH: an older checkout named there is the `core` timed
    sys.path.append(str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
