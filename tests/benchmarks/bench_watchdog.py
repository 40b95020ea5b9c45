"""What the agent watchdog (core.runtime.watchdog, issue 27 item 1) costs a run.

(a) An exec agent's start-to-reaped time (`core.runtime.process.start` of /bin/true, then
`wait`), in alternating rounds with the watchdog on (its three pipe writes per agent: `~`,
`+pgid`, `-pgid`) and off (the baseline: the link disabled, as where /proc is absent). Prints
both medians, their ratio and the difference per agent.
(b) The watchdog's own CPU time (/proc/<pid>/schedstat) over a few seconds while the worker
has a live agent (it reads the worker's /proc stat every 20 ms) and while it has none (it
waits on its pipe), as a share of one core.

    python -m tests.benchmarks.bench_watchdog               # about 15 s
    python -m tests.benchmarks.bench_watchdog --agents 400  # agents per round

Exits 1 when the watchdog costs an agent more than 5 % of a /bin/true agent's own time or more
than 1 % of a core while polling.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from core.runtime import process, watchdog_link

TARGET_RATIO = 1.05
TARGET_CPU = 0.01


def _agents(n: int) -> float:
    """Seconds per /bin/true agent, started and reaped one after another."""
    began = time.perf_counter()
    for _ in range(n):
        agent = process.start(
            ("/bin/true",), prompt="", env={}, execution_id="bench", on_message=lambda m: None
        )
        agent.wait()
    return (time.perf_counter() - began) / n


def _cpu(pid: int) -> float:
    """The process's CPU seconds so far, to the nanosecond (/proc schedstat: time on a CPU)."""
    with open(f"/proc/{pid}/schedstat", "rb") as stat:
        return int(stat.read().split()[0]) / 1e9


def _share(pid: int, seconds: float) -> float:
    before, began = _cpu(pid), time.monotonic()
    time.sleep(seconds)
    return (_cpu(pid) - before) / (time.monotonic() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=200, help="agents per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=3.0, help="each CPU share's window")
    args = parser.parse_args(argv)
    if not watchdog_link._usable:
        print("no /proc: the watchdog is never started here")
        return 0
    watchdog_link.announce()
    watchdog_link.track(None)
    link = watchdog_link._link
    assert link is not None
    _agents(20)  # warm
    on: list[float] = []
    off: list[float] = []
    for _ in range(args.rounds):
        on.append(_agents(args.agents))
        watchdog_link._link = None  # as where /proc is absent: every call does nothing
        off.append(_agents(args.agents))
        watchdog_link._link = link
    with_dog, without = statistics.median(on), statistics.median(off)
    ratio = with_dog / without
    print(f"(a) /bin/true agent, watchdog off (baseline): {without * 1e6:9.1f} us")
    print(f"    /bin/true agent, watchdog on:             {with_dog * 1e6:9.1f} us")
    print(
        f"    ratio {ratio:.3f} (target <= {TARGET_RATIO}), difference "
        f"{(with_dog - without) * 1e6:+.1f} us per agent"
    )
    assert link.proc is not None
    dog = link.proc.pid
    idle = _share(dog, args.seconds)
    sleeper = process.start(
        ("sleep", "600"), prompt="", env={}, execution_id="bench", on_message=lambda m: None
    )
    try:
        polling = _share(dog, args.seconds)
    finally:
        sleeper.kill()
        sleeper.wait()
    print(f"(b) watchdog CPU, no agent:  {idle * 100:.2f} % of a core")
    print(
        f"    watchdog CPU, one agent: {polling * 100:.2f} % of a core (target <= "
        f"{TARGET_CPU * 100:.0f} %)"
    )
    ok = ratio <= TARGET_RATIO and polling <= TARGET_CPU
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
