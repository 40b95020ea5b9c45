"""How long a `laneway` command takes to answer, against `python -c 'import sqlalchemy'`.

Issue 14, target 1: `laneway task list` and `laneway task move` within 1.3x the time Python
takes to import SQLAlchemy, `laneway --help` within 1.2x, all measured in the same run. Every
figure is the wall time of a fresh process (the installed `laneway` script next to this
interpreter), started N times in rotation so that a load spike on the machine hits every
command alike; the median counts.

Every timed process runs as it would on a user's machine: with its modules' bytecode cached.
pip compiles what it installs, and Python writes `__pycache__` for the rest on first import;
an environment that sets PYTHONDONTWRITEBYTECODE (some containers and CI images do) would have
every laneway module compiled from source on every run (about 130 ms a command here) and the
anchor not. So the benchmark removes that variable from the timed processes' environment and
runs each command once, untimed, before the rounds: that run writes the bytecode and warms the
file cache.

    python -m tests.benchmarks.bench_commands            # 15 rounds, about a minute
    python -m tests.benchmarks.bench_commands --rounds 30
    python -m tests.benchmarks.bench_commands --baseline /path/to/other/venv/bin/laneway
    LANEWAY_TEST_PG_URL=postgresql://... python -m tests.benchmarks.bench_commands --pg

`--baseline` times another install's `laneway` script (another checkout, before a change) on
the same board in the same rotation, as `before: laneway ...` rows: a before/after comparison
from one run. Repeat it, as `--baseline LABEL=PATH`, to time several installs side by side.
With `--pg` the same commands are timed on PostgreSQL, for information: the issue's targets
are measured on SQLite, and on PostgreSQL importing SQLAlchemy, psycopg and SQLAlchemy's
psycopg dialect (a row of its own, the floor: what any program talking to PostgreSQL through
them imports before its first statement) already takes more than 1.3x the anchor; each
command's ratio to that floor is printed beside it. Exit status 0 when every (SQLite) target
holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

LANEWAY = str(Path(sys.executable).with_name("laneway"))
TARGETS = {"laneway --help": 1.2, "laneway task list": 1.3, "laneway task move": 1.3}
"""Each timed command's ceiling, as a multiple of the anchor's median."""
ANCHOR = "python -c 'import sqlalchemy'"
PG_FLOOR = "python -c 'import ...psycopg' (floor)"
"""On PostgreSQL, informative: importing SQLAlchemy, psycopg and SQLAlchemy's psycopg dialect,
which any program that talks to PostgreSQL through them does before its first statement."""


def _plain_env() -> dict[str, str]:
    """This process's environment, minus what would keep bytecode from being cached."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _env(url: str) -> dict[str, str]:
    env = _plain_env()
    env["LANEWAY_DB"] = url
    return env


def _laneway(url: str, *args: str) -> str:
    done = subprocess.run(
        [LANEWAY, *args], env=_env(url), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"laneway {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def prepare_board(url: str) -> str:
    """A board with the Kanban template and one task in Backlog; the task's id."""
    _laneway(url, "init")
    _laneway(url, "workflow", "create", "--template", "simple")
    made = json.loads(
        _laneway(url, "--json", "task", "create", "--workflow", "Kanban", "--title", "bench")
    )
    _laneway(url, "task", "move", made["id"], "Backlog")
    return str(made["id"])


def commands(
    url: str, task_id: str, baselines: Sequence[tuple[str, str]] = ()
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Name -> (argv, environment). `task move` alternates between two steps that start no
    agent (a manual move, E2): the step is appended per round."""
    plain = _plain_env()
    found = {
        "python -c pass": ([sys.executable, "-c", "pass"], plain),
        ANCHOR: ([sys.executable, "-c", "import sqlalchemy"], plain),
    }
    if not url.startswith("sqlite"):
        floor = "import sqlalchemy, psycopg, sqlalchemy.dialects.postgresql.psycopg"
        found[PG_FLOOR] = ([sys.executable, "-c", floor], plain)
    for label, script in (*((f"{name}: ", path) for name, path in baselines), ("", LANEWAY)):
        found[f"{label}laneway --help"] = ([script, "--help"], _env(url))
        found[f"{label}laneway task list"] = ([script, "task", "list"], _env(url))
        found[f"{label}laneway task move"] = ([script, "task", "move", task_id], _env(url))
    return found


def _time(argv: Sequence[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode().strip()}")
    return elapsed


def measure(
    url: str, rounds: int, baselines: Sequence[tuple[str, str]] = ()
) -> dict[str, list[float]]:
    task_id = prepare_board(url)
    found = commands(url, task_id, baselines)
    times: dict[str, list[float]] = {name: [] for name in found}
    steps = ("Review", "Backlog")  # the task starts in Backlog
    moves = 0

    def argv_of(name: str, argv: list[str]) -> list[str]:
        # Every move really moves: each goes to the step the task is not at.
        nonlocal moves
        if not name.endswith("laneway task move"):
            return argv
        moves += 1
        return [*argv, steps[(moves - 1) % 2]]

    for name, (argv, env) in found.items():  # write bytecode, warm the file cache: untimed
        _time(argv_of(name, argv), env)
    for _round in range(rounds):
        for name, (argv, env) in found.items():
            times[name].append(_time(argv_of(name, argv), env))
    return times


def report(label: str, times: dict[str, list[float]], *, judged: bool = True) -> bool:
    """Print each median and its ratio to the anchor; with `judged`, against its target
    (False when one is missed). Unjudged (PostgreSQL: the issue's targets are SQLite's), each
    laneway row shows its ratio to the import floor as well."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    anchor = medians[ANCHOR]
    floor = medians.get(PG_FLOOR)
    ok = True
    print(f"\n{label}: median of {len(times[ANCHOR])} runs each")
    last = "target" if judged else ("/ floor" if floor is not None else "")
    print(f"{'command':<40}{'median ms':>10}{'ratio':>8}  {last}")
    for name, median in medians.items():
        ratio = median / anchor
        target = TARGETS.get(name)
        verdict = ""
        if target is not None and judged:
            passed = ratio <= target
            ok = ok and passed
            verdict = f"<= {target}  {'PASS' if passed else 'FAIL'}"
        elif target is not None and floor is not None:
            verdict = f"{median / floor:.2f}"
        print(f"{name:<40}{median * 1000:>10.0f}{ratio:>8.2f}  {verdict}")
    return ok


@contextmanager
def sqlite_board() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="laneway-bench-cmd-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'board.db'}"


@contextmanager
def postgres_board(server_url: str) -> Iterator[str]:
    """A database of this run's own on the server, dropped afterwards."""
    import sqlalchemy as sa

    admin = sa.create_engine(
        server_url.replace("postgresql://", "postgresql+psycopg://", 1),
        isolation_level="AUTOCOMMIT",
    )
    name = f"laneway_bench_cmd_{os.getpid()}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield server_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def _labelled(baseline: str) -> tuple[str, str]:
    """`LABEL=PATH` or a bare `PATH` (labelled "before")."""
    label, sep, path = baseline.partition("=")
    return (label, path) if sep else ("before", baseline)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="runs of each command")
    parser.add_argument(
        "--pg", action="store_true", help="also on PostgreSQL (LANEWAY_TEST_PG_URL)"
    )
    parser.add_argument(
        "--baseline",
        metavar="[LABEL=]LANEWAY",
        action="append",
        default=[],
        help="another install's laneway script, timed alongside as 'LABEL: ...' (default "
        "label 'before'); repeat it to time several",
    )
    args = parser.parse_args(argv)
    baselines = [_labelled(b) for b in args.baseline]
    if not Path(LANEWAY).exists():
        raise SystemExit(f"no laneway script at {LANEWAY}: pip install -e . first")
    load = os.getloadavg()[0]
    print(f"laneway command startup, {os.cpu_count()} CPUs, load average {load:.1f}")
    with sqlite_board() as url:
        ok = report("SQLite (WAL)", measure(url, args.rounds, baselines))
    if args.pg:
        server = os.environ.get("LANEWAY_TEST_PG_URL")
        if not server:
            raise SystemExit("--pg needs LANEWAY_TEST_PG_URL")
        with postgres_board(server) as url:
            report("PostgreSQL (information)", measure(url, args.rounds, baselines), judged=False)
    print("\nall targets met" if ok else "\nsome target missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
