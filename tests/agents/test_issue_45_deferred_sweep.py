"""Issue 45 item 4: what exec turns left outside their process groups is swept in one pass over
/proc for every turn that ended within the batch's wait, not one pass per turn; a turn whose
sweep was not asked for is left alone."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from core.agents.protocols import exec_process as process

pytestmark = pytest.mark.slow


def _leftover(execution_id: str) -> subprocess.Popen[bytes]:
    """A process in a session of its own carrying a turn's mark, as a `setsid` child of an
    agent does, once its mark can be read. Popen returns when the exec has closed its error
    pipe, before the kernel has set the new environment's bounds: until then /proc shows an
    empty environment (CI run 53 swept nothing, at load 5)."""
    proc = subprocess.Popen(
        ["sleep", "300"],
        env={"PATH": os.environ["PATH"], process.EXECUTION_ENV: execution_id},
        start_new_session=True,
    )
    mark = f"{process.EXECUTION_ENV}={execution_id}".encode()
    deadline = time.monotonic() + 10
    while mark not in (process._environ(str(proc.pid)) or b"") and time.monotonic() < deadline:
        time.sleep(0.001)
    return proc


def test_issue_45_item_4_two_turns_leftovers_are_swept_together_and_no_other_turns() -> None:
    first, second, other = _leftover("turn-a"), _leftover("turn-b"), _leftover("turn-c")
    try:
        process.defer_sweep("turn-a", first.pid + 100000)
        process.defer_sweep("turn-b", second.pid + 100000)
        # swept within the batch's wait, without anyone asking again
        assert first.wait(timeout=10) == -9
        assert second.wait(timeout=10) == -9
        assert other.poll() is None
        # one pass finds every marked turn it is given, and only those
        third = _leftover("turn-d")
        assert set(process._sweep({"turn-d": 1, "turn-e": 2})) == {third.pid}
        assert third.wait(timeout=10) == -9
        assert other.poll() is None
        assert process.sweep_deferred() == []
    finally:
        for proc in (first, second, other):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
