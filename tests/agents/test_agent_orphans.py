"""No orphans, no doubles (issue 11, class 4).

An agent runs in a process group of its own and dies with its worker however the worker dies:
a `laneway worker` killed with -9 mid-turn leaves no agent alive a second later (Linux's
parent-death signal), and every stop kills the agent's whole group. A verdict is recorded at
most once per run and seat: when the killed worker's agent had already given its verdict, the
re-run of that run records nothing more.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.agents.protocols import exec_process as process
from core.host import Host
from core.store import tables as t
from tests.agents.conftest import (
    inspect_host,
    laneway,
    laneway_script,
    python_agent,
    run_rows,
    script_env,
)
from tests.conftest import open_host

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal"),
]

D = t.workflow_step_decisions


def _alive(pid: int) -> bool:
    """Running, or stopped: anything but gone or a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _reviewer(state: Path) -> list[str]:
    """Approves at once; on its first run it then stays in its turn for a minute."""
    return python_agent(
        "import json, os, sys, time\n"
        "sys.stdin.read()\n"
        "print(json.dumps({'decision': 'approved', 'comment': 'looks fine'}), flush=True)\n"
        f"state = {str(state)!r}\n"
        "first = not os.path.exists(state)\n"
        "open(state, 'a').write(f'{os.getpid()}\\n')\n"
        "if first:\n"
        "    time.sleep(60)\n"
    )


def _decisions(url: str) -> list[dict[str, object]]:
    with inspect_host(url) as host, host.store.read() as conn:
        return [dict(r) for r in conn.execute(sa.select(D)).mappings()]


def test_ac11_4_a_worker_killed_with_9_mid_turn_leaves_no_agent_and_no_second_verdict(
    db_url: str, tmp_path: Path
) -> None:
    """AC-11.4: kill -9 the worker while its agent is in a turn (verdict already given); a
    second later the agent is gone; the re-run of the run records no second decision."""
    state = tmp_path / "reviewer.pids"
    with open_host(db_url) as host:
        wf = host.workflows.create_from_template("office-default")
        host.workspace.set(office_workflow=wf.id)
        rev = host.profiles.add("rev", command=_reviewer(state), role="reviewer").id
        host.participants.add(step="Review", role="reviewer", profile="rev", workflow=wf.id)
        task = host.tasks.create(workflow=wf.id, title="Git sync")
        host.tasks.move(task.id, "Review")
    worker = subprocess.Popen(
        [laneway_script(), "--db", db_url, "worker"],
        cwd=tmp_path,
        env=script_env(),
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "worker.log").open("w"),
    )
    try:
        _wait_for(lambda: state.exists() and state.read_text().strip(), 60, "the agent's turn")
        agent = int(state.read_text().split()[0])
        _wait_for(lambda: len(_decisions(db_url)) == 1, 30, "the verdict")
        assert _alive(agent)

        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        killed_at = time.monotonic()
        while _alive(agent) and time.monotonic() - killed_at < 1.0:
            time.sleep(0.02)
        assert not _alive(agent), "the agent outlived its worker by a second"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)

    again = laneway("--db", db_url, "worker", "--once", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    # the run was worked a second time, unless the verdict had moved the card on by then: a
    # run whose task left its step is cancelled without launching (issue 22, `step_left`)
    (run,) = [r for r in run_rows(db_url) if r["agent_profile_id"] == rev]
    worked = len(state.read_text().split())
    if run["status"] == "cancelled":
        assert (run["cancel_reason"], worked) == ("step_left", 1)
    else:
        assert worked == 2

    (decision,) = _decisions(db_url)
    assert decision["decision"] == "approved"
    assert decision["superseded_at"] is None
    assert decision["run_id"] is not None


def test_ac11_4_stopping_an_agent_kills_its_whole_process_group(tmp_path: Path) -> None:
    """What the agent started dies with it on every stop, not only the agent itself."""
    child = tmp_path / "child.pid"
    command = python_agent(
        "import subprocess, sys, time\n"
        "sys.stdin.read()\n"
        "p = subprocess.Popen(['sleep', '60'])\n"
        f"open({str(child)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    agent = process.start(
        tuple(command), prompt="", env=env, execution_id="e", on_message=lambda _m: None
    )
    try:
        _wait_for(lambda: child.exists() and child.read_text(), 30, "the agent's child")
        grandchild = int(child.read_text())
        assert _alive(grandchild)

        agent.kill()
        agent.popen.wait(timeout=10)

        _wait_for(lambda: not _alive(grandchild), 1.0, "the agent's child to die")
    finally:
        process.kill_group(agent.popen.pid)


def _seat_and_run(host: Host) -> tuple[str, str, str]:
    wf = host.workflows.create_from_template("office-default")
    host.workspace.set(office_workflow=wf.id)
    host.profiles.add("rev", command=["true"], role="reviewer")
    host.participants.add(step="Review", role="reviewer", profile="rev", workflow=wf.id)
    host.profiles.add("rev2", command=["true"], role="reviewer")
    host.participants.add(step="Review", role="reviewer", profile="rev2", workflow=wf.id)
    task = host.tasks.create(workflow=wf.id, title="Git sync")
    host.tasks.move(task.id, "Review")
    review = next(s.id for s in wf.steps if s.name == "Review")
    return task.id, review, host.profiles.get("rev").id


def test_ac11_4_a_verdict_is_recorded_once_per_run_and_seat(host: Host) -> None:
    task, review, rev = _seat_and_run(host)

    first = host.decisions.record_for_agent(task, review, rev, "rejected", run_id="run-1")
    again = host.decisions.record_for_agent(task, review, rev, "approved", run_id="run-1")

    assert first["recorded"] is True
    assert again["recorded"] is False
    assert again["decision"].id == first["decision"].id
    (only,) = host.decisions.list(task, review)
    assert (only.decision, only.run_id, only.superseded_at) == ("rejected", "run-1", None)


def test_ac11_4_a_later_run_still_supersedes_the_seats_verdict(host: Host) -> None:
    task, review, rev = _seat_and_run(host)

    host.decisions.record_for_agent(task, review, rev, "rejected", run_id="run-1")
    later = host.decisions.record_for_agent(task, review, rev, "approved", run_id="run-2")

    assert later["recorded"] is True
    old, new = host.decisions.list(task, review)
    assert (old.decision, old.superseded_at is not None) == ("rejected", True)
    assert (new.decision, new.superseded_at) == ("approved", None)
