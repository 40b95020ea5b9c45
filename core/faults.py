"""Named fault points at commit boundaries, for crash tests.

`LANEWAY_FAULT=<point>[@N]` makes the process exit at once with status 99 the N-th time
(default the first) it reaches `<point>`; the variable is read once, the first time any point
is reached. Unset, `reach` is two comparisons.

In-process tests can also make a point wait instead of exit (`pause_at`): the thread that
reaches it blocks until the test releases it, which lets a test interleave two dispatches
deterministically.
"""

from __future__ import annotations

import os
import sys
import threading

POINTS = frozenset(
    {
        "transition.after_commit",
        "dispatch.before_claim",
        "dispatch.after_claim",
        "dispatch.after_effect",
        "clear_decisions.before_commit",
        "fan_out.before_commit",
        "worker.after_claim",
        "comment.before_commit",
        "comment.after_commit",
        "outbox.after_deliver",
        "merge.after_commit",
        "merge.after_ref",
        "merge.before_marker",
        "push.after_push",
        "travel.before_push",
        "travel.after_push",
        "push.before_marker",
        "pull_request.after_open",
        "pull_request.before_marker",
        "pull_request.after_move",
        "wake.mid_notify",
    }
)
EXIT_STATUS = 99

_counts: dict[str, int] = {}
_lock = threading.Lock()
_pauses: dict[str, Pause] = {}


class Pause:
    """A point armed to wait: the first thread to reach it blocks until `release()`."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.reached = threading.Event()
        self._go = threading.Event()

    def release(self) -> None:
        self._go.set()

    def wait_here(self) -> None:
        _pauses.pop(self.point, None)  # only the first arrival waits
        self.reached.set()
        self._go.wait()


def pause_at(point: str) -> Pause:
    """Arm `point` to make the next thread reaching it wait for `release()`."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}")
    pause = Pause(point)
    _pauses[point] = pause
    return pause


_UNREAD: tuple[str, int] = ("", 0)
_armed_point: tuple[str, int] | None = _UNREAD


def _armed() -> tuple[str, int] | None:
    # Read once per process: the variable arms a process when it starts (crash tests start
    # one with it set), and an arrival reaches several points, each one an environ lookup.
    global _armed_point
    if _armed_point is _UNREAD:
        spec = os.environ.get("LANEWAY_FAULT")
        _armed_point = None
        if spec:
            point, _, nth = spec.partition("@")
            _armed_point = (point, int(nth) if nth.isdigit() else 1)
    return _armed_point


def reach(point: str) -> None:
    if _pauses:
        pause = _pauses.get(point)
        if pause is not None:
            pause.wait_here()
    armed = _armed()
    if armed is None or armed[0] != point:
        return
    with _lock:
        _counts[point] = _counts.get(point, 0) + 1
        hit = _counts[point] == armed[1]
    if hit:
        sys.stderr.flush()
        os._exit(EXIT_STATUS)
