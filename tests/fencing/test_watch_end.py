"""Ending the watch of the liveness lock wakes it at once: a worker ending (`laneway worker
--once` with nothing queued, any host's `work()` returning) does not sit out the rest of the
watch's poll. The watch slept its poll through on SQLite and polled the lock
connection's socket for it on PostgreSQL, so every worker's end waited up to a quarter second
(`laneway worker --once` on an empty queue: 0.54 s of wall time before, 0.30 s after)."""

from __future__ import annotations

import threading
import time

from core.host import Host

LONG_POLL_S = 60.0
"""The watch's poll here: a watch ended without being woken would take this long to end."""
ENDED_WITHIN_S = 30.0
"""Far from both: an end that woke the watch takes milliseconds, one that did not, a minute."""


def test_ending_the_watch_wakes_it_at_once(host: Host) -> None:
    lost: list[str] = []
    keeper = host._keeper
    assert keeper is not None
    before = threading.active_count()
    end = keeper.watch(lost.append, poll=LONG_POLL_S)
    time.sleep(0.2)  # the watch is in its wait
    began = time.monotonic()
    end()
    took = time.monotonic() - began
    assert took < ENDED_WITHIN_S, f"the watch took {took:.1f} s to end"
    assert threading.active_count() == before  # its thread is gone, not left behind
    assert lost == []  # waking it is no loss of the lock
    end()  # a second end is harmless (its pipe is closed, nothing is written anywhere)
    assert host.live_epoch() == host.epoch
