"""`laneway worker` as a real process: killed right after a claim it leaves a run a restart
finishes exactly once; Ctrl-C lets a running agent end its turn, or kills it after the grace
period; either way nothing stays claimed."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.store import tables as t
from office_plugin.demo import agent_command
from tests.agents.conftest import (
    enqueue,
    inspect_host,
    laneway,
    laneway_script,
    plain_workflow,
    run_rows,
    script_env,
    sleeper,
)
from tests.conftest import open_host

pytestmark = pytest.mark.slow


def _office_at_review(url: str, state: Path) -> tuple[str, dict[str, str]]:
    """Office Default, two scripted reviewers (each counts its turns in `state`) and an
    approver; one task moved into Review, whose entry queued one run per reviewer."""
    with open_host(url) as host:
        wf = host.workflows.create_from_template("office-default")
        host.workspace.set(office_workflow=wf.id)
        for name in ("rev-a", "rev-b"):
            host.profiles.add(
                name,
                command=agent_command("reviewer", "--state", str(state / name)),
                role="reviewer",
            )
            host.participants.add(step="Review", role="reviewer", profile=name, workflow=wf.id)
        host.profiles.add("appr", command=agent_command("approver"), role="approver")
        host.participants.add(step="Approval", role="approver", profile="appr", workflow=wf.id)
        task = host.tasks.create(workflow=wf.id, title="Git sync")
        host.tasks.move(task.id, "Review")
        return task.id, {s.name: s.id for s in wf.steps}


def test_a_worker_killed_after_a_claim_leaves_a_run_the_next_worker_finishes_once(
    db_url: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    task, steps = _office_at_review(db_url, state)
    assert [r["status"] for r in run_rows(db_url)] == ["queued", "queued"]

    crashed = laneway(
        "--db",
        db_url,
        "worker",
        "--once",
        cwd=tmp_path,
        env={"LANEWAY_FAULT": "worker.after_claim"},
    )
    assert crashed.returncode == 99, crashed.stderr
    rows = run_rows(db_url)
    assert sorted(r["status"] for r in rows) == ["claimed", "queued"]
    assert not list(state.iterdir())  # no agent was launched

    again = laneway("--db", db_url, "--json", "worker", "--once", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    # both reviewer runs (the orphan re-queued), then the approver's run Approval queued
    assert json.loads(again.stdout) == {"claimed": 3, "finished": 3, "failed": 0}
    rows = run_rows(db_url)
    assert len(rows) == 3
    assert [r["status"] for r in rows] == ["finished"] * 3
    assert len({(r["agent_profile_id"], r["workflow_step_id"]) for r in rows}) == 3
    # each reviewer took exactly one turn, and decided once
    assert {p.name: p.read_text() for p in state.iterdir()} == {"rev-a": "1", "rev-b": "1"}
    with inspect_host(db_url) as host:
        decisions = host.decisions.list(task, steps["Review"])
        assert sorted(d.decision for d in decisions) == ["approved", "approved"]
        assert all(d.superseded_at is None for d in decisions)
        assert host.tasks.get(task).workflow_step_id == steps["Done"]
        with host.store.read() as conn:
            reviews = conn.execute(sa.select(sa.func.count()).select_from(t.task_review_runs))
            assert reviews.scalar() == 0


def _claimed_line(proc: subprocess.Popen[str], timeout: float = 30) -> dict[str, object]:
    """Read the worker's JSON progress on stderr until a run is claimed."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "claimed":
            return event
    raise AssertionError("the worker claimed nothing")


def _worker(url: str, cwd: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [laneway_script(), "--db", url, "--json", "worker", *extra],
        cwd=cwd,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _one_run(url: str, tmp_path: Path, command: list[str]) -> str:
    with open_host(url) as host:
        wf = plain_workflow(host, tmp_path)
        task = host.tasks.create(workflow=wf, title="slow work")
        agent = host.profiles.add("slow", command=command).id
        return enqueue(host, agent, task.id)


def test_ctrl_c_lets_the_running_agent_end_its_turn(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    run_id = _one_run(db_url, tmp_path, sleeper(1.5))
    proc = _worker(db_url, tmp_path)  # no --once: it would poll until interrupted
    started.append(proc)
    assert _claimed_line(proc)["run_id"] == run_id
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out) == {"claimed": 1, "finished": 1, "failed": 0}
    assert "Traceback" not in err
    rest = [json.loads(line) for line in err.splitlines()]  # --json: JSON lines only
    assert [e["event"] for e in rest if "event" in e] == ["shutdown", "finished"]
    (row,) = run_rows(db_url)
    assert row["status"] == "finished"


def test_agents_still_running_after_the_grace_period_are_killed_and_their_runs_requeued(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """Issue 22 "Stop and retry": stopping a worker lets running turns finish within its grace
    period and puts the rest back in the queue, not failed (not the agent's failures)."""
    run_id = _one_run(db_url, tmp_path, sleeper(120))
    proc = _worker(db_url, tmp_path, "--grace", "0.5")
    started.append(proc)
    assert _claimed_line(proc)["run_id"] == run_id
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - began < 30
    assert proc.returncode == 0, err
    assert json.loads(out) == {"claimed": 1, "finished": 0, "failed": 0}
    (row,) = run_rows(db_url)
    assert row["status"] == "queued"  # back in the queue, not left claimed
    assert row["claimed_epoch"] is None
    assert row["attempts"] == 0  # a shutdown is not one of the run's attempts
    assert '"event": "requeued"' in err


def test_a_second_interrupt_kills_the_agents_at_once(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    _one_run(db_url, tmp_path, sleeper(120))
    # a grace longer than the agent sleeps: only the second interrupt can end the worker
    # before communicate's 60 s, no timed bound needed (issue 38 item 20)
    proc = _worker(db_url, tmp_path, "--once", "--grace", "600")
    started.append(proc)
    _claimed_line(proc)
    proc.send_signal(signal.SIGINT)
    # the second only once the first was handled: two signals before the handler runs are one
    assert proc.stderr is not None
    while '"event": "shutdown"' not in (line := proc.stderr.readline()):
        assert line, "the worker ended before it said it was stopping"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out)["failed"] == 0
    assert [r["status"] for r in run_rows(db_url)] == ["queued"]
