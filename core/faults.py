"""Named fault points at commit boundaries, for crash tests.

`LANEWAY_FAULT=<point>[@N]` makes the process exit at once with status 99 the N-th time
(default the first) it reaches `<point>`. Unset, `reach` is one dictionary lookup.
"""

from __future__ import annotations

import os
import sys
import threading

POINTS = frozenset(
    {
        "transition.after_commit",
        "dispatch.after_claim",
        "dispatch.after_effect",
        "clear_decisions.before_commit",
        "worker.after_claim",
    }
)
EXIT_STATUS = 99

_counts: dict[str, int] = {}
_lock = threading.Lock()


def _armed() -> tuple[str, int] | None:
    spec = os.environ.get("LANEWAY_FAULT")
    if not spec:
        return None
    point, _, nth = spec.partition("@")
    return point, int(nth) if nth.isdigit() else 1


def reach(point: str) -> None:
    armed = _armed()
    if armed is None or armed[0] != point:
        return
    with _lock:
        _counts[point] = _counts.get(point, 0) + 1
        hit = _counts[point] == armed[1]
    if hit:
        sys.stderr.flush()
        os._exit(EXIT_STATUS)
