"""Numbers that come in from outside (a command-line option, an HTTP body, a workflow file)
are finite: `inf`, `nan` and what overflows to them (`1e999`) are refused where they come in,
in one line naming where, so none is ever stored, compared against or printed as `Infinity`
(which is not JSON). `-0` is taken as `0`: the sign of a zero means nothing to a limit, a
timeout or a position."""

from __future__ import annotations

import math
from typing import Final

NOT_FINITE: Final = "is not a finite number"


def finite(value: float) -> float | None:
    """`value` with a zero's sign dropped, or None when it is infinite or NaN."""
    if not math.isfinite(value):
        return None
    return value + 0.0 if value == 0 else value
