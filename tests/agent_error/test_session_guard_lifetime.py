"""Issue 14, target 5 (memory): a session's failure guard lives only while someone holds or
waits for it, so a host that handles a million failures keeps no lock per session it has
seen. Unit tests of `AgentRuntime.guard` alone (no host is needed to take a guard)."""

from __future__ import annotations

import threading
from typing import Any, cast

from core.agents.runtime import AgentRuntime


def _runtime() -> AgentRuntime:
    return AgentRuntime(cast(Any, None), retry_delays=())


def test_issue14_memory_guards_of_finished_sessions_are_dropped() -> None:
    """After 1,000 sessions' guards were taken and released, none is kept."""
    runtime = _runtime()
    for n in range(1000):
        with runtime.guard(f"s{n}"):
            assert runtime.guard_held(f"s{n}")
        assert not runtime.guard_held(f"s{n}")
    assert runtime.guards.held == {}


def test_issue14_memory_a_waiting_holder_keeps_the_guard_exclusive() -> None:
    """Dropping the lock of a released session never lets two holders in at once: a waiter
    keeps the same lock alive, and the last one out drops it."""
    runtime = _runtime()
    inside = threading.Event()
    release = threading.Event()
    entered: list[str] = []

    def first() -> None:
        with runtime.guard("s"):
            inside.set()
            release.wait(10)
            entered.append("first out")

    def second() -> None:
        with runtime.guard("s"):
            entered.append("second in")

    one = threading.Thread(target=first)
    one.start()
    assert inside.wait(10)
    two = threading.Thread(target=second)
    two.start()
    two.join(0.2)
    assert entered == []  # the second waits on the first's lock
    release.set()
    one.join(10)
    two.join(10)
    assert entered == ["first out", "second in"]
    assert runtime.guards.held == {}
