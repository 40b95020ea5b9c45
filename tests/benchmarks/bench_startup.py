"""Issue 45 item 6: `laneway task move` on SQLite against `python -c 'import sqlalchemy'`.

Target: the move within 1.2x the anchor. Each round runs the anchor and then the move (to the
step the task is not at, so every move really moves), back to back, and keeps their ratio: a
load spike on a shared machine hits a pair, not one side of a median. The report gives each
side's min/median/max wall time and the ratio's min/median/max over the rounds, with the load
average before and after. `--baseline [LABEL=]SCRIPT` times another install's `laneway` script
in the same rounds (a checkout before a change), so before and after come from one run.

The timed processes run as `bench_commands` runs them: bytecode cached, one untimed run each
first (see its docstring).

    python -m tests.benchmarks.bench_startup               # 15 rounds
    python -m tests.benchmarks.bench_startup --rounds 30 --baseline before=/tmp/old/laneway
    python -m tests.benchmarks.bench_startup --cpu     # each process's CPU, for a loaded machine
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.benchmarks.bench_commands import (
    LANEWAY,
    _env,
    _labelled,
    _plain_env,
    prepare_board,
    sqlite_board,
)

TARGET = 1.2
ANCHOR = "python -c 'import sqlalchemy'"
IMPORTS = ("sqlalchemy", "sqlalchemy.dialects.sqlite", "attr", "click", "pluggy")
"""What `task move` cannot start without besides sqlalchemy: its SQLite dialect and laneway's
own stack. Timed in the same rounds, it shows how much of the target's 20 % is left for
laneway's own code (about half: these imports alone are ~1.15 of the anchor here)."""
DEPENDENCIES = "python -c 'import <the stack>'"
CPU = False
"""Set by `--cpu`: time each process's own CPU (user + system, from wait4) instead of its wall
time. On a loaded machine the wall time is mostly waiting for a core; the CPU a process
spends is what it costs, and what a quiet machine's wall time comes close to."""


def _time(argv: Sequence[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stderr is not None
    said = child.stderr.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stderr.close()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {said.decode().strip()}")
    return usage.ru_utime + usage.ru_stime if CPU else elapsed


def measure(
    url: str, rounds: int, baselines: Sequence[tuple[str, str]] = ()
) -> tuple[list[float], dict[str, list[float]]]:
    """The anchor's times, and each other command's: the stack's imports (`IMPORTS`),
    `laneway task move`, then the baselines' moves."""
    task_id = prepare_board(url)
    scripts = {"laneway task move": LANEWAY} | {
        f"{label}: laneway task move": path for label, path in baselines
    }
    steps = ("Review", "Backlog")  # the task starts in Backlog
    moves = 0

    def move(script: str) -> float:
        nonlocal moves
        moves += 1
        return _time([script, "task", "move", task_id, steps[(moves - 1) % 2]], _env(url))

    anchor_argv = [sys.executable, "-c", "import sqlalchemy"]
    imports_argv = [sys.executable, "-c", f"import {', '.join(IMPORTS)}"]
    _time(anchor_argv, _plain_env())  # bytecode written, file cache warm: untimed
    _time(imports_argv, _plain_env())
    for script in scripts.values():
        move(script)
    anchor: list[float] = []
    times: dict[str, list[float]] = {DEPENDENCIES: []} | {name: [] for name in scripts}
    for _round in range(rounds):
        anchor.append(_time(anchor_argv, _plain_env()))
        times[DEPENDENCIES].append(_time(imports_argv, _plain_env()))
        for name, script in scripts.items():
            times[name].append(move(script))
    return anchor, times


def _spread(values: Sequence[float], scale: float = 1.0, fmt: str = ".0f") -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return " / ".join(format(v * scale, fmt) for v in (low, mid, high))


def report(anchor: list[float], times: dict[str, list[float]]) -> bool:
    print(f"{'command':<40}{'ms min / median / max':>26}{'ratio min / median / max':>28}")
    print(f"{ANCHOR:<40}{_spread(anchor, 1000):>26}")
    ok = True
    for name, values in times.items():
        ratios = [v / a for v, a in zip(values, anchor, strict=True)]
        print(f"{name:<40}{_spread(values, 1000):>26}{_spread(ratios, fmt='.2f'):>28}")
        if name == "laneway task move":
            ok = statistics.median(ratios) <= TARGET
    print(f"target: laneway task move median ratio <= {TARGET}: {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="pairs of runs")
    parser.add_argument(
        "--baseline",
        metavar="[LABEL=]LANEWAY",
        action="append",
        default=[],
        help="another install's laneway script, timed in the same rounds",
    )
    parser.add_argument(
        "--cpu", action="store_true", help="time each process's CPU, not its wall time"
    )
    args = parser.parse_args(argv)
    global CPU
    CPU = args.cpu
    if not Path(LANEWAY).exists():
        raise SystemExit(f"no laneway script at {LANEWAY}: pip install -e . first")
    before = os.getloadavg()[0]
    with sqlite_board() as url:
        anchor, times = measure(url, args.rounds, [_labelled(b) for b in args.baseline])
    after = os.getloadavg()[0]
    print(
        f"issue 45 item 6, SQLite, {'CPU' if CPU else 'wall'} time, {args.rounds} rounds, "
        f"{os.cpu_count()} CPUs, "
        f"load average {before:.1f} before, {after:.1f} after"
    )
    return 0 if report(anchor, times) else 1


if __name__ == "__main__":
    sys.exit(main())
