"""Issue "Many processes, one board": every command works while `laneway worker` runs, and the
worker acts on what the commands changed — move, create, send, turn complete, cancel-retry,
profile add, workflow import — each through a separate `laneway` process."""

from __future__ import annotations

import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import eventually
from tests.multiprocess.conftest import Board

pytestmark = pytest.mark.slow

FLOW = textwrap.dedent(
    """\
    id: {id}
    name: {name}
    steps:
      - id: todo
        name: Todo
        position: 0
        is_start_step: true
        allow_manual_move: true
      - id: doing
        name: Doing
        position: 1
        allow_manual_move: true
        events:
          on_turn_complete:
            - type: move_to_next
      - id: done
        name: Done
        position: 2
        allow_manual_move: true
    """
)


def _agent(script: Path, code: str) -> str:
    """A profile command running `code` as a script file (commands are split like a shell)."""
    script.write_text(textwrap.dedent(code))
    return f"{sys.executable} {script}"


def _gated_recorder(tmp_path: Path) -> str:
    """Appends each prompt it gets to prompts.log (one JSON string a line), then works until
    the test creates `go`, so the test can act while a turn is certainly running."""
    return _agent(
        tmp_path / "recorder.py",
        f"""
        import json, os, sys, time
        open({str(tmp_path / "prompts.log")!r}, "a").write(json.dumps(sys.stdin.read()) + "\\n")
        deadline = time.time() + 60
        while not os.path.exists({str(tmp_path / "go")!r}) and time.time() < deadline:
            time.sleep(0.05)
        """,
    )


def _always_transient(tmp_path: Path) -> str:
    return _agent(
        tmp_path / "flaky.py",
        f"""
        import sys
        sys.stdin.read()
        open({str(tmp_path / "starts.log")!r}, "a").write("x\\n")
        sys.exit(75)
        """,
    )


def _session_of(board: Board, task: str, state: str | None = None) -> dict[str, Any] | None:
    sessions = board.json("session", "list", "--task", task)
    for session in sessions:
        if state is None or session["state"] == state:
            return dict(session)
    return None


def test_every_command_works_while_a_worker_runs_and_the_worker_acts_on_it(
    board: Board, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = board.spawn(
        "worker", "--concurrency", "2", env={"LANEWAY_RETRY_DELAYS": "30,30,30"}, log=log
    )
    try:
        time.sleep(0.5)
        # workflow import and profile add, after the worker started
        (tmp_path / "mp.yml").write_text(FLOW.format(id="mp", name="MP"))
        (tmp_path / "flaky.yml").write_text(FLOW.format(id="flaky", name="Flaky"))
        (mp,) = board.json("workflow", "import", str(tmp_path / "mp.yml"))
        (flaky_wf,) = board.json("workflow", "import", str(tmp_path / "flaky.yml"))
        prompts = tmp_path / "prompts.log"
        starts = tmp_path / "starts.log"
        board.json("profile", "add", "slow", "--command", _gated_recorder(tmp_path))
        board.json("profile", "add", "flaky", "--command", _always_transient(tmp_path))
        board.json("participant", "add", "--workflow", mp["id"], "--step", "Doing",
                   "--role", "runner", "--profile", "slow")  # fmt: skip
        board.json("participant", "add", "--workflow", flaky_wf["id"], "--step", "Doing",
                   "--role", "runner", "--profile", "flaky")  # fmt: skip

        # task create + task start (E5): the worker runs the new profile's agent
        a = board.json("task", "create", "--workflow", "MP", "--title", "A")
        board.json("task", "start", a["id"], "--step", "Doing")
        eventually(lambda: prompts.exists() and prompts.read_text(), what="A's turn")
        running = _session_of(board, a["id"], "RUNNING")
        assert running is not None
        # session send while the turn runs in the worker: queued, delivered when it ends
        sent = board.json("session", "send", running["id"], "also update the docs")
        assert sent["metadata"]["queued_messages"] == ["also update the docs"]
        (tmp_path / "go").touch()
        eventually(
            lambda: prompts.exists() and len(prompts.read_text().splitlines()) == 2,
            what="the message delivered as the next turn",
        )
        assert prompts.read_text().splitlines()[1] == '"also update the docs"'
        # the first turn's end fired on_turn_complete in the worker: Doing -> Done
        assert eventually(
            lambda: (
                board.json("task", "show", a["id"])["workflow_step_id"]
                == _step(board, "MP", "Done")
            ),
            what="A at Done",
        )

        # task move + turn complete (an agent outside laneway) while the worker runs
        b = board.json("task", "create", "--workflow", "MP", "--title", "B")
        board.json("task", "move", b["id"], "Doing")
        board.json("session", "start", b["id"])
        turned = board.json("turn", "complete", b["id"])
        assert turned["transitioned"] is True
        assert turned["to_step_id"] == _step(board, "MP", "Done")

        # cancel-retry (route R6) reaching the retry loop inside the worker process
        c = board.json("task", "create", "--workflow", "Flaky", "--title", "C")
        board.json("task", "start", c["id"], "--step", "Doing")
        eventually(lambda: starts.exists() and starts.read_text(), what="the flaky agent")
        retrying = eventually(lambda: _session_of(board, c["id"], "RUNNING"), what="retry loop")
        board.json("session", "cancel-retry", retrying["id"])
        (run,) = eventually(
            lambda: [r for r in board.json("runs", "list", "--task", c["id"])
                     if r["status"] == "failed"] or None,
            what="the cancelled run",
        )  # fmt: skip
        assert "cancelled" in run["error_message"]
        # no retry after the cancel: without it the run fails only after three more starts
        assert len(starts.read_text().splitlines()) == 1
    finally:
        worker.send_signal(signal.SIGINT)
        code = worker.wait(60)
    assert code == 0, log.read_text()


def _step(board: Board, workflow: str, name: str) -> str:
    shown = board.json("workflow", "show", workflow)
    return next(s["id"] for s in shown["steps"] if s["name"] == name)
