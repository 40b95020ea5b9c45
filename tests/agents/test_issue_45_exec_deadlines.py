"""Issue 45: an exec turn's deadlines (`--turn-timeout`, `--idle-timeout`) are watched by the
process's one deadline keeper, not by a thread handed each turn and woken at its end (two
thread switches of every run a worker drains). What the deadlines do is unchanged: an agent
silent past its idle timeout, or working past its turn timeout, is killed once with AGENTS.md's
message; one that keeps talking is left alone, however many turns are watched at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from core.agents.protocols import exec as exec_protocol
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
    keepers = [t for t in threading.enumerate() if t.name == "laneway-deadlines"]
    assert len(keepers) == 1


def test_issue_45_a_stopped_turns_deadlines_are_not_watched_any_more() -> None:
    """A turn that ended before its deadline is never killed after it (its process group may
    be another turn's by then)."""
    turn, proc = _turn("ended")
    watch = exec_protocol._Deadlines(turn, turn_timeout=0.2, idle_timeout=0.2)
    watch.start()
    watch.stop()
    time.sleep(0.6)
    assert (turn.timed_out, proc.kills) == (None, 0)
