"""Run a snippet of Python in a child process with a fault point armed.

``LANEWAY_FAULT=<point>[@N]`` makes a laneway process exit at once with status 99 the N-th time
it reaches `<point>` (see ``core.faults`` and docs/operations.md). The child sees the parent's
``sys.path``, so it imports the same laneway, the same plugins and the test's own modules.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from core import faults

CRASHED = faults.EXIT_STATUS
"""The exit status of a process stopped by its fault point."""


@attrs.frozen
class FaultRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def crashed(self) -> bool:
        """Whether the fault point fired (exit status 99)."""
        return self.returncode == CRASHED

    def describe(self) -> str:
        tail = self.stderr.strip().splitlines()[-15:]
        return f"exit status {self.returncode}; stderr:\n" + "\n".join(tail)


def run_with_fault(
    snippet: str,
    fault: str | None,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120.0,
) -> FaultRun:
    """Run `snippet` (``python -c``, with `args` as ``sys.argv[1:]``) with ``LANEWAY_FAULT``
    set to `fault` (None: unset) and return how it ended.

    :param env: extra environment variables for the child (on top of this process's own).
    """
    child_env = {**os.environ, **(env or {})}
    child_env.pop("LANEWAY_FAULT", None)
    if fault is not None:
        if fault.partition("@")[0] not in faults.POINTS:
            raise ValueError(f"unknown fault point {fault!r}: one of {sorted(faults.POINTS)}")
        child_env["LANEWAY_FAULT"] = fault
    path = [p for p in sys.path if p and os.path.isdir(p)]
    if child_env.get("PYTHONPATH"):
        path.append(child_env["PYTHONPATH"])
    child_env["PYTHONPATH"] = os.pathsep.join(path)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(snippet), *args],
        env=child_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return FaultRun(done.returncode, done.stdout, done.stderr)
