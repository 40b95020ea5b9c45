"""Issue 27 item 1, with real processes: a paused worker's agents pause with it, so no run's
agent runs beside the run's next execution ("No run's agent runs twice at once under any fault
above"), and they die with it (docs/guarantees.md "A paused or partitioned worker").

- paused (SIGSTOP) past the moment its liveness lock is lost and another process re-claims and
  finishes its run, then woken (SIGCONT): its agent is stopped the whole time the second
  execution runs, has no effect after the pause, is killed on the wake before it runs on, and
  the worker lives on;
- a stop of the worker's whole process group (Ctrl-Z, `kill -STOP -<pgid>`) freezes its agents
  too, and they run on when it does;
- a worker killed with -9 leaves nothing of its agents' process groups behind (its watchdog
  kills them, what the agent started included, and exits).

The first and the last fail on the main this branch started from (the paused worker's agent
ran on beside the second execution; the agent's own child outlived the killed worker).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.agents import worker
from core.runs import RunRequest
from core.store import tables as t
from tests.agents.test_acp_worker import FAKE as FAKE_ACP
from tests.agents.test_acp_worker import Board as AcpBoard
from tests.conftest import eventually, open_host
from tests.fencing.test_fencing import take_lock_away
from tests.multiprocess.conftest import LANEWAY, child_env
from tests.on_enter.conftest import raw

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

WAIT_S = 30.0
SLACK_S = 0.25
"""How long after a pause an agent may still have acted: the watchdog's 20 ms poll, with room
for a loaded machine's scheduling."""


def _until(probe: Any, what: str, timeout: float = WAIT_S) -> Any:
    return eventually(probe, timeout=timeout, what=what, every=0.01)


def _state(pid: int) -> str | None:
    """The process's state letter (T: stopped); None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    state = stat.rpartition(b")")[2].split()[0].decode()
    return None if state in ("Z", "X") else state


def _ticks(path: Path) -> list[float]:
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def _ticker(pids: Path, ticks: Path, *, first_only: bool = False, child: bool = False) -> str:
    """An agent that notes its pid (and its child's), then appends a timestamp to `ticks` every
    50 ms for a minute: its effect outside the database. With `first_only`, a later execution
    instead says which state the first one's agent is in, and ends."""
    return (
        "import json, os, subprocess, sys, time\n"
        "sys.stdin.read()\n"
        f"p, ticks = {str(pids)!r}, {str(ticks)!r}\n"
        + (
            "if os.path.exists(p):\n"
            "    first = int(open(p).read().split()[0])\n"
            "    state = open(f'/proc/{first}/stat').read().rpartition(')')[2].split()[0]\n"
            "    print(json.dumps({'log': f'second at {time.time()} first {state}'}), flush=True)\n"
            "    sys.exit(0)\n"
            if first_only
            else ""
        )
        + ("kid = subprocess.Popen(['sleep', '60']).pid\n" if child else "kid = ''\n")
        + "open(p + '.tmp', 'w').write(f'{os.getpid()} {kid}\\n')\n"
        "os.rename(p + '.tmp', p)\n"
        "for _ in range(1200):\n"
        "    with open(ticks, 'a') as out:\n"
        "        out.write(f'{time.time()}\\n')\n"
        "    time.sleep(0.05)\n"
    )


def _queue(db_url: str, code: str) -> str:
    with open_host(db_url) as setup:
        wf = setup.workflows.create_from_template("simple")
        agent = setup.profiles.add("ticker", command=[sys.executable, "-c", code]).id
        task = setup.tasks.create(workflow=wf.id, title="t").id
        step = setup.tasks.get(task).workflow_step_id
        return setup.runs.enqueue(RunRequest(agent, task, step, "t", coalesce_exempt=True)).run_id


@contextmanager
def _worker(db_url: str, cwd: Path, pids: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A `laneway worker` in a session (and process group) of its own; everything it and its
    agents started is killed at the end."""
    with open(cwd / "worker.log", "w") as out:
        w = subprocess.Popen(
            [LANEWAY, "--db", db_url, "worker"],
            cwd=cwd,
            env=child_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield w
    finally:
        if w.poll() is None:
            os.killpg(w.pid, signal.SIGCONT)
            w.kill()  # its part is over; a graceful stop would only cost time
            w.wait(timeout=30)
        for pid in pids.read_text().split() if pids.exists() else ():
            if _state(int(pid)) is not None:
                os.kill(int(pid), signal.SIGKILL)


def _first_agent(pids: Path, ticks: Path) -> list[int]:
    """The first agent's pid (and its child's, when it has one), once it has ticked twice."""
    _until(lambda: pids.exists() and len(_ticks(ticks)) >= 2, "the agent to tick")
    return [int(p) for p in pids.read_text().split()]


def _watchdogs(worker_pid: int) -> list[int]:
    """The worker's watchdog (its child running core/agents/watchdog.py), if it has one."""
    return [
        int(child)
        for task in Path(f"/proc/{worker_pid}/task").iterdir()
        for child in (task / "children").read_text().split()
        if b"watchdog.py" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


def test_item1_sigstop_past_a_reclaim_then_sigcont(db_url: str, tmp_path: Path) -> None:
    """Item 1 / SIGSTOP-SIGCONT: while the run's second execution runs, the paused worker's
    agent is stopped; it ticks nothing after the pause; it is killed when its worker wakes
    (never resumed); the run is finished once, by the second worker; the woken worker lives on
    under a new epoch and writes nothing of the run."""
    pids, ticks = tmp_path / "pids", tmp_path / "ticks"
    run = _queue(db_url, _ticker(pids, ticks, first_only=True))
    with _worker(db_url, tmp_path, pids) as w1:
        (first,) = _first_agent(pids, ticks)
        paused = time.time()
        os.kill(w1.pid, signal.SIGSTOP)
        _until(lambda: _state(first) == "T", "the paused worker's agent to stop", timeout=5)
        frozen_in = time.time() - paused
        with open_host(db_url) as b:
            with raw(db_url) as conn:
                epoch = conn.execute(
                    sa.select(t.runs.c.claimed_epoch).where(t.runs.c.id == run)
                ).scalar()
            _take_epoch(b, epoch)
            _until(lambda: b.epoch_is_dead(epoch), "the paused worker's epoch to be dead")
            summary = worker.work(b, once=True)
            assert summary.as_dict() == {"claimed": 1, "finished": 1, "failed": 0}
            epoch_b = b.epoch
        assert _state(first) == "T"  # still stopped once the second execution is over
        os.kill(w1.pid, signal.SIGCONT)
        woke = time.monotonic()
        _until(lambda: _state(first) is None, "the woken worker to kill its agent", timeout=10)
        killed_in = time.monotonic() - woke
        log = tmp_path / "worker.log"
        _until(lambda: "liveness lock lost" in log.read_text(), "the woken worker to fence")
        assert _state(w1.pid) is not None  # the worker lives on, under a new epoch
    with raw(db_url) as conn:
        (row,) = conn.execute(sa.select(t.runs).where(t.runs.c.id == run)).mappings()
        said = list(
            conn.execute(
                sa.select(t.transcript_items.c.text).where(t.transcript_items.c.run_id == run)
            ).scalars()
        )
    (second,) = [s for s in said if s.startswith("second at ")]
    second_at, first_state = float(second.split()[2]), second.split()[4]
    late = [tick for tick in _ticks(ticks) if tick > paused + SLACK_S]
    print(f"frozen_in={frozen_in * 1000:.0f}ms killed_in={killed_in * 1000:.0f}ms")
    assert first_state == "T"  # what the second execution saw of the first agent
    assert late == []  # nothing after the pause, so nothing beside the second execution
    assert max(_ticks(ticks)) < second_at
    assert (row["status"], row["claimed_epoch"]) == ("finished", epoch_b)


def test_item1_a_stop_of_the_workers_group_freezes_its_agents(db_url: str, tmp_path: Path) -> None:
    """Item 1 / Ctrl-Z: `kill -STOP -<worker's pgid>` stops the worker's group, not its agents'
    groups; the watchdog (in a session of its own, so not stopped with it) stops them, and they
    run on when the group is continued (its lock held, nothing to kill)."""
    pids, ticks = tmp_path / "pids", tmp_path / "ticks"
    _queue(db_url, _ticker(pids, ticks))
    with _worker(db_url, tmp_path, pids) as w1:
        (agent,) = _first_agent(pids, ticks)
        assert os.getpgid(agent) != w1.pid  # a group of its own: the group stop misses it
        paused = time.time()
        os.killpg(w1.pid, signal.SIGSTOP)
        _until(lambda: _state(agent) == "T", "the agent to stop with its worker", timeout=5)
        frozen_in = time.time() - paused
        (dog,) = _watchdogs(w1.pid)
        assert _state(dog) not in ("T", None)  # not stopped with the worker's group
        time.sleep(2 * SLACK_S)  # would be ten ticks had it run on
        assert [tick for tick in _ticks(ticks) if tick > paused + SLACK_S] == []
        resumed = time.time()
        os.killpg(w1.pid, signal.SIGCONT)
        _until(lambda: max(_ticks(ticks)) > resumed, "the agent to run on with its worker")
        resumed_in = max(_ticks(ticks)) - resumed
        assert _state(agent) is not None
    print(f"frozen_in={frozen_in * 1000:.0f}ms resumed_in={resumed_in * 1000:.0f}ms")


@pytest.mark.one_database
def test_item1_a_worker_killed_with_9_leaves_no_agent_group(db_url: str, tmp_path: Path) -> None:
    """Item 1 / kill -9: the worker's watchdog kills its agents' groups - what the agent itself
    started too, which the parent-death signal never reaches - and exits."""
    pids, ticks = tmp_path / "pids", tmp_path / "ticks"
    _queue(db_url, _ticker(pids, ticks, child=True))
    with _worker(db_url, tmp_path, pids) as w1:
        agent, kid = _first_agent(pids, ticks)
        assert os.getpgid(kid) == agent  # in the agent's group
        dogs = _watchdogs(w1.pid)
        w1.kill()
        w1.wait(timeout=10)
        killed = time.monotonic()
        _until(lambda: not any(map(_state, (agent, kid, *dogs))), "the agents to die", timeout=10)
        assert len(dogs) == 1  # and it ended too
        gone_in = time.monotonic() - killed
    print(f"gone_in={gone_in * 1000:.0f}ms")


@pytest.mark.one_database
def test_item1_an_acp_agent_of_a_run_reclaimed_while_paused_is_killed_not_resumed(
    db_url: str, tmp_path: Path
) -> None:
    """Item 1 / ACP: the lock lost while the worker is paused, its ACP agent (mid-turn) is
    SIGKILLed on the wake while still stopped - never resumed, where the `session/cancel` the
    fence sends would have let it run on through its grace - and the worker lives on."""
    ticks = tmp_path / "ticks"
    ticking = tmp_path / "ticking_acp_agent.py"
    ticking.write_text(  # the fake ACP agent, with a thread appending a timestamp every 50 ms
        "import os, runpy, sys, threading, time\n"
        "def tick():\n"
        f"    path = {str(ticks)!r} + f'.{{os.getpid()}}'\n"
        "    while True:\n"
        "        with open(path, 'a') as out:\n"
        "            out.write(f'{time.time()}\\n')\n"
        "        time.sleep(0.05)\n"
        "threading.Thread(target=tick, daemon=True).start()\n"
        f"sys.argv = [{FAKE_ACP!r}]\n"
        f"runpy.run_path({FAKE_ACP!r}, run_name='__main__')\n"
    )
    script = {"turns": [[{"message": "working on it"}, {"sleep": 120}]]}
    board = AcpBoard(db_url, tmp_path, script, command=(sys.executable, str(ticking)))

    def mid_turn() -> Any:
        _step, session, items = board.read()
        return any("working on it" in i["text"] for i in items) and session

    with _worker(db_url, tmp_path, tmp_path / "pids") as w1:
        session = _until(mid_turn, "the ACP agent's turn")
        agent = int(session.agent["acp_session_id"].split("-")[1])  # the fake's fake-PID-N
        paused = time.time()
        os.kill(w1.pid, signal.SIGSTOP)
        _until(lambda: _state(agent) == "T", "the paused worker's ACP agent to stop", timeout=5)
        with open_host(db_url) as b:
            with raw(db_url) as conn:
                epoch = conn.execute(
                    sa.select(t.runs.c.claimed_epoch).where(t.runs.c.status == "claimed")
                ).scalar_one()
            _take_epoch(b, epoch)
            _until(lambda: b.epoch_is_dead(epoch), "the paused worker's epoch to be dead")
        time.sleep(SLACK_S)  # ticks it would make, were it running
        os.kill(w1.pid, signal.SIGCONT)
        _until(lambda: _state(agent) is None, "the woken worker to kill its ACP agent", 10)
        assert _state(w1.pid) is not None
    mine = Path(
        f"{ticks}.{agent}"
    )  # a new agent of the worker's, for the re-queued run, ticks apart
    assert _ticks(mine)  # it ticked before the pause
    assert [tick for tick in _ticks(mine) if tick > paused + SLACK_S] == []


def _take_epoch(host: Any, epoch: str) -> None:
    """Take the paused worker's lock away (its lock file, its lock connection's backend)."""

    class _Epoch:
        def __init__(self, epoch: str) -> None:
            self.epoch = epoch
            self.store = host.store

    take_lock_away(_Epoch(epoch))  # type: ignore[arg-type]
