"""Issue 39 item 7, with real processes: a worker's watchdog killed with SIGKILL is started
again at once and told the live agent groups, so a SIGSTOP of the worker afterwards, past the
moment its lock is taken and its run re-claimed and finished by another worker, still keeps
its agent stopped: never two agents on one run (docs/guarantees.md "A paused or partitioned
worker"). On the main this branch started from no watchdog came back and the paused worker's
agent ran on beside the second execution."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from core import worker
from core.store import tables as t
from tests.conftest import open_host
from tests.multiprocess.test_fencing_faults import (
    SLACK_S,
    _first_agent,
    _queue,
    _state,
    _take_epoch,
    _ticker,
    _ticks,
    _until,
    _watchdogs,
    _worker,
)
from tests.on_enter.conftest import raw

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def test_issue_39_item_7_a_killed_watchdog_comes_back_and_a_later_pause_still_freezes_the_agent(
    db_url: str, tmp_path: Path
) -> None:
    pids, ticks = tmp_path / "pids", tmp_path / "ticks"
    run = _queue(db_url, _ticker(pids, ticks, first_only=True))
    with _worker(db_url, tmp_path, pids) as w1:
        (first,) = _first_agent(pids, ticks)
        (dog,) = _until(lambda: _watchdogs(w1.pid), "the worker's watchdog")
        os.kill(dog, signal.SIGKILL)
        (again,) = _until(
            lambda: [d for d in _watchdogs(w1.pid) if d != dog and _state(d) is not None],
            "the watchdog to be started again",
            timeout=10,
        )
        # the new watchdog took in the live group before it reads the worker's state: give
        # it one of its polls' worth of a moment to be reading, then pause the worker
        time.sleep(SLACK_S)
        paused = time.time()
        os.kill(w1.pid, signal.SIGSTOP)
        _until(lambda: _state(first) == "T", "the paused worker's agent to stop", timeout=5)
        with open_host(db_url) as b:
            with raw(db_url) as conn:
                epoch = conn.execute(
                    sa.select(t.runs.c.claimed_epoch).where(t.runs.c.id == run)
                ).scalar()
            _take_epoch(b, epoch)
            _until(lambda: b.epoch_is_dead(epoch), "the paused worker's epoch to be dead")
            summary = worker.work(b, once=True)
            assert summary.as_dict() == {"claimed": 1, "finished": 1, "failed": 0}
        assert _state(first) == "T"
        os.kill(w1.pid, signal.SIGCONT)
        _until(lambda: _state(first) is None, "the woken worker to kill its agent", timeout=10)
        log = (tmp_path / "worker.log").read_text()
        assert "agent watchdog ended; started again" in log
        assert _state(again) is not None
    with raw(db_url) as conn:
        said = list(
            conn.execute(
                sa.select(t.transcript_items.c.text).where(t.transcript_items.c.run_id == run)
            ).scalars()
        )
    (second,) = [s for s in said if s.startswith("second at ")]
    second_at, first_state = float(second.split()[2]), second.split()[4]
    assert first_state == "T"  # what the second execution saw of the first agent
    assert [tick for tick in _ticks(ticks) if tick > paused + SLACK_S] == []
    assert max(_ticks(ticks)) < second_at
