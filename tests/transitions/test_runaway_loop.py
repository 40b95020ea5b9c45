"""The runaway-loop limit: a task a trigger brings to one step more often than its workflow's
`max_step_arrivals` (default 25) since a person last moved it stops being moved by triggers,
with one WARNING and a flag `task show` shows, until a person moves it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core import Host
from core.model import DEFAULT_MAX_STEP_ARRIVALS
from office_plugin.demo import agent_command

PING_PONG = """
version: 1
type: kandev_workflow
workflows:
  - name: Ping Pong
    {limit}
    steps:
      - {{name: Work, position: 0, is_start_step: true,
          events: {{on_turn_complete: [{{type: move_to_next}}]}}}}
      - {{name: Review, position: 1,
          events: {{on_turn_complete: [{{type: move_to_previous}}]}}}}
      - {{name: Done, position: 2}}
"""


def _board(host: Host, tmp_path: Path, limit: int | None = None) -> Any:
    path = tmp_path / "ping-pong.yml"
    line = f"max_step_arrivals: {limit}" if limit is not None else ""
    path.write_text(PING_PONG.format(limit=line))
    (wf,) = host.workflows.import_file(path)
    return wf


def _bounce(host: Host, task_id: str, session_id: str, times: int) -> int:
    """Complete turns until the task stops moving (or `times` turns); the moves made."""
    moves = 0
    for _ in range(times):
        if not host.turns.complete(task_id, session_id)["transitioned"]:
            break
        moves += 1
    return moves


def test_runaway_loop_default_limit_stops_triggers_and_a_person_resumes(
    host: Host, tmp_path: Path, laneway_logs: list[dict[str, Any]]
) -> None:
    """Default 25: Work <-> Review by on_turn_complete. The 25th arrival at Review is the
    last; the next trigger move there is refused with one WARNING naming task, step and limit,
    the task is flagged (its JSON and its `task show` line say so) and stays put whatever
    triggers fire. A person's move clears the flag and the counts start afresh."""
    wf = _board(host, tmp_path)
    assert wf.max_step_arrivals == DEFAULT_MAX_STEP_ARRIVALS == 25
    task = host.tasks.create(workflow=wf.id, title="loop")
    session = host.sessions.start(task.id)

    moves = _bounce(host, task.id, session.id, 200)

    # 25 arrivals at Review and 25 back at Work; the 26th move to Review is refused
    assert moves == 2 * 25
    halted = host.tasks.get(task.id)
    review = wf.step("Review")
    assert halted.workflow_step_id == wf.step("Work").id
    assert halted.loop_halted_step_id == review.id
    assert not host.turns.complete(task.id, session.id)["transitioned"]
    warnings = [
        r for r in laneway_logs if r["level"] == "WARNING" and r["extra"].get("task_id") == task.id
    ]
    assert len(warnings) == 1
    assert (warnings[0]["extra"]["step_id"], warnings[0]["extra"]["limit"]) == (review.id, 25)

    host.tasks.move(task.id, "Review")  # a person's move

    assert host.tasks.get(task.id).loop_halted_step_id is None
    # counted afresh from the person's move, which is not itself counted
    assert _bounce(host, task.id, session.id, 200) == 2 * 25


def test_runaway_loop_limit_is_a_workflow_setting(host: Host, tmp_path: Path) -> None:
    """The limit comes from the workflow (file key `max_step_arrivals`, or
    `workflows.set_max_step_arrivals`); 0 means no limit; an export keeps a non-default one."""
    wf = _board(host, tmp_path, limit=2)
    assert wf.max_step_arrivals == 2
    assert host.workflows.export(wf.id)["workflows"][0]["max_step_arrivals"] == 2
    task = host.tasks.create(workflow=wf.id, title="loop")
    session = host.sessions.start(task.id)
    assert _bounce(host, task.id, session.id, 100) == 4

    host.workflows.set_max_step_arrivals(wf.id, 0)
    host.tasks.move(task.id, "Work")
    assert _bounce(host, task.id, session.id, 100) == 100


def _laneway(db: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("laneway")
    return subprocess.run(
        [str(exe), "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office"},
        check=False,
    )


@pytest.mark.slow
def test_runaway_loop_worker_once_ends_with_reviewers_that_always_reject(
    tmp_path: Path,
) -> None:
    """The reported case: Office Default whose reviewers (real subprocess agents) always
    reject. `laneway worker --once` used to bounce Review <-> Work for ever; with the limit
    (set to 3 here) it ends, and `task show` shows the task flagged at Review."""
    db = f"sqlite:///{tmp_path / 'board.db'}"

    def ok(*args: str) -> Any:
        done = _laneway(db, "--json", *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None

    ok("init")
    wf = ok("workflow", "create", "--template", "office-default")
    ok("workspace", "set", "--office-workflow", wf["id"])
    assert ok("workflow", "set", wf["id"], "--max-step-arrivals", "3")["max_step_arrivals"] == 3
    worker = agent_command("worker")
    reviewer = agent_command("reviewer", "--verdicts", "rejected")
    ok("profile", "add", "worker", "--command", " ".join(worker))
    ok("profile", "add", "rev", "--command", " ".join(reviewer), "--role", "reviewer")
    ok("participant", "add", "--workflow", wf["id"], "--step", "Work", "--role", "runner",
       "--profile", "worker")  # fmt: skip
    ok("participant", "add", "--workflow", wf["id"], "--step", "Review", "--role", "reviewer",
       "--profile", "rev")  # fmt: skip
    task = ok("task", "create", "--workflow", wf["id"], "--title", "never good enough")
    ok("task", "start", task["id"])

    done = _laneway(db, "worker", "--once", timeout=180)

    assert done.returncode == 0, done.stderr
    shown = ok("task", "show", task["id"])
    review = next(s["id"] for s in wf["steps"] if s["name"] == "Review")
    assert shown["loop_halted_step_id"] == review
    text = _laneway(db, "task", "show", task["id"])
    assert "runaway loop" in text.stdout
    runs = ok("runs", "list", "--task", task["id"])
    assert [r for r in runs if r["status"] == "queued"] == []
