"""The agent commands' JSON shapes and errors: `session send`, `session cancel-retry`,
`agent fail`, `worker` and `demo` (CLI.md)."""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from core.cli import build_cli
from core.plugin.selection import PluginSelection
from tests.cli.conftest import Laneway
from tests.conftest import open_host

TRIAGE = textwrap.dedent(
    """\
    id: triage
    name: Triage board
    steps:
      - id: doing
        name: Doing
        position: 0
        is_start_step: true
        allow_manual_move: true
        events:
          on_agent_error:
            - type: move_to_step
              config:
                step_id: triage
      - id: triage
        name: Triage
        position: 1
        allow_manual_move: true
      - id: done
        name: Done
        position: 2
        allow_manual_move: true
    """
)
ECHO = shlex.join([sys.executable, "-c", "import sys; print(sys.stdin.read()[:20])"])


def _session_keys(lw: Laneway, task: str) -> set[str]:
    (row,) = lw.json("session", "list", "--task", task)
    return set(row)


def _triage_task(lw: Laneway, tmp_path: Path) -> tuple[str, dict[str, str]]:
    path = tmp_path / "triage.yml"
    path.write_text(TRIAGE)
    (wf,) = lw.json("workflow", "import", str(path))
    task = lw.json("task", "create", "--workflow", wf["id"], "--title", "flaky build")
    return task["id"], {s["name"]: s["id"] for s in wf["steps"]}


# -- session send / cancel-retry ----------------------------------------------------------------


def test_session_send_prints_the_session(laneway: Laneway, tmp_path: Path) -> None:
    lw = laneway
    task, _steps = _triage_task(lw, tmp_path)
    session = lw.json("session", "start", task)
    sent = lw.json("session", "send", session["id"], "hello")
    assert set(sent) == _session_keys(lw, task)
    assert sent["id"] == session["id"]
    assert sent["state"] == "RUNNING"
    assert sent["metadata"]["messages_delivered"] == ["hello"]
    text = lw.run("session", "send", session["id"], "again")
    assert text.exit_code == 0
    assert "queued=1" in text.stdout


def test_session_send_errors_are_one_line(sqlite_laneway: Laneway, tmp_path: Path) -> None:
    lw = sqlite_laneway
    task, _steps = _triage_task(lw, tmp_path)
    session = lw.json("session", "start", task)["id"]
    assert "empty" in lw.fails("session", "send", session, "  ")
    assert "no session" in lw.fails("session", "send", "missing", "hi")
    lw.fails("session", "send", session, code=2)  # TEXT is required: a usage error


def test_cancel_retry_records_the_request_on_a_running_session(
    laneway: Laneway, tmp_path: Path
) -> None:
    lw = laneway
    task, _steps = _triage_task(lw, tmp_path)
    session = lw.json("session", "start", task)["id"]
    line = lw.fails("session", "cancel-retry", session)
    assert "WAITING_FOR_INPUT" in line
    assert "no retry loop" in line
    lw.json("turn", "start", task, "--session", session)  # RUNNING
    cancelled = lw.json("session", "cancel-retry", session)
    assert set(cancelled) == _session_keys(lw, task)
    assert cancelled["metadata"]["cancel_retry_requested"] is True
    assert "no session" in lw.fails("session", "cancel-retry", "missing")


# -- agent fail -------------------------------------------------------------------------------


def test_agent_fail_dispatches_on_agent_error_under_the_failure_operation_id(
    laneway: Laneway, tmp_path: Path
) -> None:
    lw = laneway
    task, steps = _triage_task(lw, tmp_path)
    session = lw.json("session", "start", task)["id"]
    out = lw.json(
        "agent", "fail", task, "--session", session, "--execution", "ex-1", "--message", "boom"
    )
    assert out == {"dispatched": True, "operation_id": f"agent_error:session:{session}:ex-1"}
    shown = lw.json("task", "show", task)
    assert shown["workflow_step_id"] == steps["Triage"]  # the step's on_agent_error move
    assert shown["state"] == "REVIEW"  # a kanban task goes to REVIEW for a human
    (failed,) = lw.json("session", "list", "--task", task)
    assert failed["state"] == "WAITING_FOR_INPUT"  # a kanban session stays recoverable
    assert failed["error_message"] == "boom"
    assert failed["metadata"]["last_agent_error"] == {"message": "boom", "route": "R1"}

    lw.json("task", "move", task, "Doing")
    other = lw.json("agent", "fail", task, "--session", session)
    assert other == {"dispatched": True, "operation_id": f"agent_error:session:{session}"}
    text = lw.run("agent", "fail", task, "--session", session, "--execution", "ex-2")
    assert text.exit_code == 0
    assert text.stdout.startswith("on_agent_error dispatched (operation agent_error:session:")


def test_agent_fail_on_an_office_task_is_not_dispatched_by_the_host(
    laneway: Laneway,
) -> None:
    lw = laneway
    wf = lw.json("workflow", "create", "--template", "office-default")
    lw.json("workspace", "set", "--office-workflow", wf["id"])
    task = lw.json("task", "create", "--workflow", wf["id"], "--title", "office work")["id"]
    session = lw.json("session", "start", task)["id"]
    out = lw.json("agent", "fail", task, "--session", session, "--execution", "e")
    reason = out.pop("reason")
    assert out == {"dispatched": False, "operation_id": f"agent_error:session:{session}:e"}
    assert "the task is office's" in reason  # it says why (issue 10)
    (failed,) = lw.json("session", "list", "--task", task)
    assert failed["state"] == "FAILED"  # Office sessions fail


def test_agent_fail_errors_are_one_line(sqlite_laneway: Laneway, tmp_path: Path) -> None:
    lw = sqlite_laneway
    task, _steps = _triage_task(lw, tmp_path)
    other = lw.json("task", "create", "--workflow", "Triage board", "--title", "other")["id"]
    session = lw.json("session", "start", other)["id"]
    assert "does not belong to task" in lw.fails("agent", "fail", task, "--session", session)
    assert "no task" in lw.fails("agent", "fail", "missing", "--session", session)
    lw.fails("agent", "fail", task, code=2)  # --session is required
    lw.json("profile", "add", "bot", "--command", ECHO)
    with open_host(lw.url) as host:
        internal = host.sessions.start(task, profile="bot", external=False).id
    line = lw.fails("agent", "fail", task, "--session", internal)
    assert "run by laneway" in line


# -- worker -----------------------------------------------------------------------------------


def _queued_run(lw: Laneway) -> str:
    lw.json("workflow", "create", "--template", "simple")
    lw.json("profile", "add", "echo", "--command", ECHO)
    lw.json(
        "participant", "add", "--workflow", "Kanban", "--step", "In Progress",
        "--role", "runner", "--profile", "echo",
    )  # fmt: skip
    task = lw.json("task", "create", "--workflow", "Kanban", "--title", "work it")["id"]
    lw.json("task", "start", task)
    (run,) = lw.json("runs", "list", "--task", task)
    assert run["status"] == "queued"
    return str(run["id"])


@pytest.mark.slow
def test_worker_once_prints_the_summary_and_json_progress(laneway: Laneway) -> None:
    lw = laneway
    assert lw.json("worker", "--once") == {"claimed": 0, "finished": 0, "failed": 0}
    run_id = _queued_run(lw)
    result = lw.run("--json", "worker", "--once")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"claimed": 1, "finished": 1, "failed": 0}
    progress: list[dict[str, Any]] = [json.loads(line) for line in result.stderr.splitlines()]
    mine = [p for p in progress if p.get("run_id") == run_id]
    assert [p["event"] for p in mine] == ["claimed", "finished"]
    assert mine[1]["ok"] is True
    assert mine[1]["error"] is None
    assert set(mine[0]) == {
        "event", "run_id", "agent_profile_id", "task_id", "workflow_step_id", "reason", "ok",
        "error",
    }  # fmt: skip
    (run,) = lw.json("runs", "list", "--status", "finished")
    assert run["id"] == run_id


@pytest.mark.slow
def test_worker_prints_plain_progress_lines_off_a_terminal(sqlite_laneway: Laneway) -> None:
    lw = sqlite_laneway
    run_id = _queued_run(lw)
    result = lw.run("worker", "--once", "--max-runs", "1", "--concurrency", "2")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "claimed 1, finished 1, failed 0"
    lines = result.stderr.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["claimed", "run", run_id],
        ["finished", "run", run_id],
    ]
    assert "\r" not in result.stderr
    assert all("agent=echo" in line for line in lines)


@pytest.mark.parametrize(
    "args",
    [("--concurrency", "0"), ("--max-runs", "0"), ("--grace", "-1"), ("--concurrency", "x")],
)
def test_worker_usage_errors(sqlite_laneway: Laneway, args: tuple[str, str]) -> None:
    sqlite_laneway.fails("worker", "--once", *args, code=2)


# -- demo -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_demo_json_shape(
    fresh_laneway: Laneway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # `laneway demo` is the Office plugin's command (laneway_cli_commands)
    fresh_laneway.cli = build_cli(selection=PluginSelection(allow=frozenset({"kanban", "office"})))
    result = fresh_laneway.run("--json", "demo", db=False)
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) == {"task_id", "final_step", "timeline"}
    assert out["final_step"] == "Done"
    assert isinstance(out["task_id"], str)
    assert {"at", "event", "text"} <= set(out["timeline"][0])
    assert list(tmp_path.glob("laneway-demo-*/demo.db"))
