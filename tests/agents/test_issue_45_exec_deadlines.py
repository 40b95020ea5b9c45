"""Issue 45: an exec turn's deadlines (`--turn-timeout`, `--idle-timeout`) are watched by the
process's one deadline keeper, a job on the exec reactor's thread, not by a thread handed each
turn and woken at its end (two thread switches of every run a worker drains) nor by a thread
of the keeper's own. What the deadlines do is unchanged: an agent
silent past its idle timeout, or working past its turn timeout, is killed once with AGENTS.md's
message; one that keeps talking is left alone, however many turns are watched at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from core.agents.protocols import exec as exec_protocol
from core.agents.protocols import exec_reactor
from core.agents.stops import LiveTurn


class _Proc:
    def __init__(self) -> None:
        self.kills = 0

    def kill(self) -> None:
        self.kills += 1


def _turn(name: str) -> tuple[LiveTurn, _Proc]:
    proc = _Proc()
    turn = LiveTurn(
        task_id=f"task-{name}", step_id=None, run_id=f"run-{name}", agent_profile_id=None
    )
    turn.proc = proc  # type: ignore[assignment]
    return turn, proc


def test_issue_45_the_keeper_kills_the_silent_and_the_late_once_and_leaves_the_talking(
    handed_jobs: list[Callable[[], None]],
) -> None:
    silent, silent_proc = _turn("silent")
    talking, talking_proc = _turn("talking")
    late, late_proc = _turn("late")
    watches = [
        exec_protocol._Deadlines(silent, turn_timeout=60.0, idle_timeout=0.3),
        exec_protocol._Deadlines(talking, turn_timeout=60.0, idle_timeout=0.3),
        exec_protocol._Deadlines(late, turn_timeout=0.4, idle_timeout=60.0),
    ]
    for watch in watches:
        watch.start()
    try:
        until = time.monotonic() + 1.2
        while time.monotonic() < until:
            watches[1].heard()  # it keeps talking
            time.sleep(0.05)
    finally:
        for watch in watches:
            watch.stop()
    assert (silent.timed_out, silent_proc.kills) == ("agent silent for 0.3 s", 1)
    assert (late.timed_out, late_proc.kills) == ("turn timed out after 0.4 s", 1)
    assert (talking.timed_out, talking_proc.kills) == (None, 0)
    assert handed_jobs == [], "a turn's deadlines were handed to a thread of their own"
    names = [t.name for t in threading.enumerate()]
    assert names.count("laneway-exec-io") == 1, names
    assert "laneway-deadlines" not in names, names


def test_issue_45_a_stopped_turns_deadlines_are_not_watched_any_more() -> None:
    """A turn that ended before its deadline is never killed after it (its process group may
    be another turn's by then)."""
    turn, proc = _turn("ended")
    watch = exec_protocol._Deadlines(turn, turn_timeout=0.2, idle_timeout=0.2)
    watch.start()
    watch.stop()
    time.sleep(0.6)
    assert (turn.timed_out, proc.kills) == (None, 0)


def test_issue_45_a_job_armed_from_any_thread_runs_on_the_reactor_in_its_order() -> None:
    """`later` from a thread that is not the reactor's: a job due before every other one wakes
    the reactor (it would otherwise sleep until the other is due), jobs run on the reactor's
    thread, and a cancelled one never runs."""
    ran: list[tuple[str, str, float]] = []
    began = time.monotonic()
    first, after = threading.Event(), threading.Event()

    def job(name: str, done: threading.Event | None = None) -> Callable[[], None]:
        def run() -> None:
            ran.append((name, threading.current_thread().name, time.monotonic() - began))
            if done is not None:
                done.set()

        return run

    late = exec_reactor.reactor.later(5.0, job("late"))
    exec_reactor.reactor.later(0.2, job("cancelled")).cancel()
    exec_reactor.reactor.later(0.1, job("first", first))
    assert first.wait(30.0), ran
    assert ran[0][:2] == ("first", "laneway-exec-io")
    assert ran[0][2] < 5.0, "the reactor slept until the late job instead of being woken"
    late.cancel()
    exec_reactor.reactor.later(0.3, job("after", after))
    assert after.wait(30.0), ran
    assert [name for name, _thread, _at in ran] == ["first", "after"]
