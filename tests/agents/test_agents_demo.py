"""`laneway demo` end to end, as a real process: the Office loop with scripted agents reaches
Done in seconds, and its timeline shows the failure recovered and both review rounds."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import inspect_host, laneway
from tests.conftest import open_host

pytestmark = pytest.mark.slow

WALL_LIMIT_S = 30.0
"""Generous: the demo takes about a second or two on a 2-core machine."""


def _events(timeline: list[dict[str, Any]], kind: str, **fields: Any) -> list[dict[str, Any]]:
    return [
        e for e in timeline if e["event"] == kind and all(e.get(k) == v for k, v in fields.items())
    ]


def assert_office_loop(timeline: list[dict[str, Any]]) -> None:
    """What the walk must show, whichever reviewer the worker happens to take first."""
    assert all(isinstance(e["at"], float | int) and isinstance(e["text"], str) for e in timeline)
    assert [e["at"] for e in timeline] == sorted(e["at"] for e in timeline)
    assert timeline[0]["event"] == "task_started"

    # The worker's first run fails terminally; Office's on_agent_error queues the CEO, whose
    # finished turn moves the card on; the worker's later run succeeds.
    (failed,) = _events(timeline, "run_failed")
    assert (failed["agent"], failed["reason"]) == ("worker", "task_assigned")
    assert "status 1" in failed["error"]
    index = timeline.index(failed)
    (recovery,) = _events(timeline, "agent_error", path="office")
    assert timeline.index(recovery) > index
    assert recovery["step"] == "Work"
    assert recovery["action_count"] == 1
    ceo = _events(timeline, "run_queued", agent="ceo", reason="agent_error")
    assert len(ceo) == 1
    assert _events(timeline, "run_finished", agent="ceo")
    later = _events(timeline, "run_finished", agent="worker", reason="task_assigned")
    assert len(later) == 1
    assert timeline.index(later[0]) > index

    # Two review rounds: entry #1 rejected by reviewer-1, entry #2 approved by both; then the
    # approver. Reviewer-2 approves entry #1 only when its run came first: taken after the
    # rejection sent the card back to Work, its run is cancelled (`step_left`, issue 22).
    arrivals = [e.get("entry_seq") for e in _events(timeline, "arrival", step="Review")]
    assert arrivals == [1, 2]
    rounds: dict[int, dict[str, str]] = {}
    for e in _events(timeline, "decision", step="Review"):
        rounds.setdefault(e["entry_seq"], {})[e["agent"]] = e["verdict"]
    assert rounds[1]["reviewer-1"] == "rejected"
    assert rounds[1].get("reviewer-2") in (None, "approved")
    assert rounds[2] == {"reviewer-1": "approved", "reviewer-2": "approved"}
    assert set(rounds) == {1, 2}
    approvals = [(e["agent"], e["verdict"]) for e in _events(timeline, "decision", step="Approval")]
    assert approvals == [("approver", "approved")]
    moves = [(e["from_step"], e["to_step"]) for e in _events(timeline, "move")]
    assert moves[-1] == ("Approval", "Done")
    assert ("Review", "Work") in moves
    assert moves.count(("Work", "Review")) == 2
    fan_outs = _events(timeline, "action", action="queue_run_for_each_participant", step="Review")
    assert [(e["matching"], e["enqueued"]) for e in fan_outs] == [(2, 2), (2, 2)]


def test_demo_on_a_fresh_temporary_database(tmp_path: Path) -> None:
    began = time.monotonic()
    proc = laneway("--json", "demo", cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    assert took < WALL_LIMIT_S
    out = json.loads(proc.stdout)
    assert set(out) == {"task_id", "final_step", "timeline"}
    assert out["final_step"] == "Done"
    assert_office_loop(out["timeline"])
    # --json: the progress on stderr is JSON lines too, the same events
    streamed = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [e["event"] for e in streamed if "event" in e] == [e["event"] for e in out["timeline"]]
    # the database was made in a temporary directory, not in the working directory
    assert not (tmp_path / "laneway.db").exists()
    (made,) = tmp_path.glob("laneway-demo-*/demo.db")
    with inspect_host(f"sqlite:///{made}") as host:
        task = host.tasks.get(out["task_id"])
        assert task.state == "COMPLETED"
        assert len(host.runs.list(task=task.id)) == 8


def test_demo_on_the_given_database(db_url: str, tmp_path: Path) -> None:
    """`--db` (SQLite file or PostgreSQL): initialised by the demo when it needs it."""
    proc = laneway("--db", db_url, "--json", "demo", cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["final_step"] == "Done"
    assert_office_loop(out["timeline"])
    with inspect_host(db_url) as host:
        task = host.tasks.get(out["task_id"])
        workflow = host.workflows.by_id(task.workflow_id or "")
        assert host.workspace.get().office_workflow_id == workflow.id
        statuses = sorted(r.status for r in host.runs.list(task=task.id))
        # reviewer-2's first run is cancelled (step_left) when reviewer-1's rejection came first
        cancelled = statuses.count("cancelled")
        assert cancelled in (0, 1)
        assert statuses == ["cancelled"] * cancelled + ["failed"] + ["finished"] * (7 - cancelled)

    # Issue 25 item 8: the board the demo leaves works for a later worker on that database.
    # Its profiles' agents live in the installed package (never in a directory the demo
    # deleted); on a task a person adds they simply do their job: no run fails.
    with open_host(db_url) as host:
        later = host.tasks.create(workflow=workflow.id, title="after the demo")
        host.tasks.start(later.id)
        commands = [p.command for p in host.profiles.list()]
    assert all(Path(c[1]).name == "agents.py" and Path(c[1]).exists() for c in commands)
    worker = laneway(
        "--db", db_url, "--json", "worker", "--once", cwd=tmp_path, env={"TMPDIR": str(tmp_path)}
    )
    assert worker.returncode == 0, worker.stderr
    assert json.loads(worker.stdout) == {"claimed": 4, "finished": 4, "failed": 0}
    assert "Traceback" not in worker.stderr
    assert "WARNING" not in worker.stderr
    with inspect_host(db_url) as host:
        done = host.tasks.get(later.id)
    step = workflow.step(done.workflow_step_id or "")
    assert (done.state, step.name if step else None) == ("COMPLETED", "Done")

    # A second demo on the same database builds its own board beside the first.
    again = laneway("--db", db_url, "--json", "demo", cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["task_id"] != out["task_id"]
    assert second["final_step"] == "Done"


def test_demo_reads_as_a_timeline_and_a_table(tmp_path: Path) -> None:
    proc = laneway("demo", cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("FAILED" in line and "worker" in line for line in lines)
    assert any(line.split()[:2] == ["#", "agent"] for line in lines)
    assert any("reached Done (COMPLETED)" in line for line in lines)
    # issue 25 item 9: the duration is measured, and printed last
    took = lines[-1].removeprefix("the demo took ")
    assert took.endswith("s")
    assert 0 < float(took.removesuffix("s")) < WALL_LIMIT_S
    assert proc.stderr == ""


def test_demo_without_the_office_feature_fails_in_one_line(tmp_path: Path) -> None:
    proc = laneway("--no-office", "demo", cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 1
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("laneway: ")
    assert "office" in line


def test_demo_timeline_comes_from_events_not_log_text(tmp_path: Path) -> None:
    """Issue 12 item 5: every log message reworded (and laneway's logging switched on, so the
    records exist) leaves the timeline exactly as it is: it is built from board events
    (`laneway_event`), and no log record is read."""
    import loguru

    from office_plugin import demo
    from tests.conftest import open_host

    def reworded(record: Any) -> None:
        record["message"] = "reworded"

    loguru.logger.configure(patcher=reworded)
    loguru.logger.enable("core")
    loguru.logger.enable("office_plugin")
    try:
        with open_host(f"sqlite:///{tmp_path / 'demo.db'}") as host:
            result = demo.run(host, tmp_path / "agents")
            manager = host.bundle.registry.hooks.manager
            assert not manager.hook.laneway_event.get_hookimpls()  # the walk's observer left
    finally:
        loguru.logger.configure(patcher=lambda _record: None)
        loguru.logger.disable("core")
        loguru.logger.disable("office_plugin")
    timeline = list(result.timeline)
    assert_office_loop(timeline)
    labels = [e["event"] for e in timeline]
    assert labels.count("arrival") == 5  # Review #1, Work, Review #2, Approval, Done
    assert labels.count("agent_said") == 2  # the CEO's and the worker's lines
    (dispatch,) = _events(timeline, "action", trigger="on_agent_error")
    assert (dispatch["action"], dispatch["target"], dispatch["enqueued"]) == (
        "queue_run",
        "workspace.ceo_agent",
        1,
    )
    clears = _events(timeline, "action", action="clear_decisions", step="Review")
    first_round = [e for e in _events(timeline, "decision", step="Review") if e["entry_seq"] == 1]
    assert [e["removed"] for e in clears] == [0, len(first_round)]
    assert len(first_round) in (1, 2)
