"""What the agent watchdog (core.agents.watchdog, issue 27 item 1) costs a run.

(a) An exec agent's start-to-reaped time (`core.agents.protocols.exec_process.start` of
/bin/true, then
`wait`), in alternating rounds with the watchdog on (its three pipe writes per agent: `~`,
`+pgid`, `-pgid`) and off (the baseline: the link disabled, as where /proc is absent). Prints
both medians, their ratio and the difference per agent: on a loaded machine the rounds' noise
is larger than the difference, so (a2) times what the watchdog adds to an agent's path - the
three link calls - by themselves, against the same baseline.
(b) The watchdog's own CPU time (/proc/<pid>/schedstat) over a few seconds while the worker
has a live agent (it reads the worker's /proc stat every 20 ms) and while it has none (it
waits on its pipe), as a share of one core; the baseline, measured over the same window, is
the floor of any 20 ms poller: a `python -I -S` process that only sleeps 20 ms in a loop.

    python -m tests.benchmarks.bench_watchdog               # about 15 s
    python -m tests.benchmarks.bench_watchdog --agents 400  # agents per round

Exits 1 when the link's calls cost an agent more than 1 % of a /bin/true agent's own time, or
takes more than 1 % of a core while it polls (the bare poller's figure shows how much of that
is the machine's price of a timer wake).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from core.agents import watchdog_link
from core.agents.protocols import exec_process as process

TARGET_SHARE = 0.01
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


def _shares(pids: list[int], seconds: float) -> list[float]:
    """Each process's share of one core over the same `seconds`."""
    before, began = [_cpu(p) for p in pids], time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - began
    return [(_cpu(p) - b) / took for p, b in zip(pids, before, strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=50, help="agents per round")
    parser.add_argument("--rounds", type=int, default=20)
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
    print(f"    ratio {ratio:.3f}, difference {(with_dog - without) * 1e6:+.1f} us per agent")
    # 1,000 agents' words fit the pipe (64 KiB) between two of the watchdog's reads of it
    costs = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(1000):
            watchdog_link.announce()
            watchdog_link.track(2**22 + 1)  # above pid_max's default: nobody's group
            watchdog_link.untrack(2**22 + 1)
        costs.append((time.perf_counter() - began) / 1000)
        time.sleep(0.6)
    link_cost = statistics.median(costs)
    share = link_cost / without
    print(
        f"(a2) the link's calls per agent: {link_cost * 1e6:.1f} us, {share * 100:.2f} % of the"
        f" baseline agent (target <= {TARGET_SHARE * 100:.0f} %)"
    )
    assert link.proc is not None
    dog = link.proc.pid
    bare = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", "import time\nwhile True: time.sleep(0.02)"]
    )
    sleeper = None
    try:
        (idle,) = _shares([dog], args.seconds)
        sleeper = process.start(
            ("sleep", "600"), prompt="", env={}, execution_id="bench", on_message=lambda m: None
        )
        polling, floor = _shares([dog, bare.pid], args.seconds)
    finally:
        bare.kill()
        bare.wait()
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
    print(f"(b) watchdog CPU, no agent:  {idle * 100:.2f} % of a core")
    print(f"    bare 20 ms poller (baseline): {floor * 100:.2f} % of a core")
    print(
        f"    watchdog CPU, one agent: {polling * 100:.2f} % of a core (target <= "
        f"{TARGET_CPU * 100:.0f} %), {polling / floor:.1f} times the bare poller"
    )
    ok = share <= TARGET_SHARE and polling <= TARGET_CPU
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
