"""Issue 39 item 8: what an exec agent starts and moves out of its process group (`setsid`, a
double fork) does not outlive its turn; a real `laneway worker` process, both databases."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.agents.conftest import enqueue, laneway, plain_workflow
from tests.conftest import eventually, open_host

pytestmark = pytest.mark.slow


def _gone(pid: int) -> bool:
    """Exited (a zombie its new parent has not reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] in (b"Z", b"X")


def test_issue_39_item_8_a_setsid_double_forked_child_of_an_exec_agent_dies_with_its_turn(
    db_url: str, tmp_path: Path
) -> None:
    pidfile = tmp_path / "sleeper.pid"
    code = textwrap.dedent(
        f"""\
        import subprocess, sys
        sys.stdin.read()
        # sh starts `setsid sleep` in the background and exits: the sleeper is in a session of
        # its own, and its parent is gone before the agent ends
        subprocess.run(["sh", "-c", "setsid sleep 300 & echo $! > {pidfile}"], check=True)
        """
    )
    with open_host(db_url) as host:
        workflow = plain_workflow(host, tmp_path)
        agent = host.profiles.add("agent", command=[sys.executable, "-c", code])
        task = host.tasks.create(workflow=workflow, title="leaves a child")
        enqueue(host, agent.id, task.id)

    done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    pid = int(pidfile.read_text())
    try:
        # the worker swept it before it reported the turn done; waited for only because a
        # SIGKILLed process may take a moment to be reaped by whoever adopted it
        eventually(lambda: _gone(pid), timeout=10, what=f"leftover sleep {pid} to die")
    finally:
        if not _gone(pid):
            os.kill(pid, 9)
