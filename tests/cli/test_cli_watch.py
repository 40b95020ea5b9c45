"""Issue 25 item 11: `laneway watch` (alias `events`) tails the board's event stream in a
terminal, read from the event log as `serve`'s stream reads it, with no `serve` running:
readable lines by default, JSON lines with --json, one task with --task, from now unless
--since replays; Ctrl-C ends it with exit 0."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import laneway_script, script_env
from tests.cli.conftest import Laneway
from tests.conftest import open_host


def _board(lw: Laneway) -> tuple[dict[str, Any], dict[str, Any]]:
    lw.json("workflow", "create", "--template", "simple")
    mail = lw.json("task", "create", "--workflow", "Kanban", "--title", "Sort the mail")
    lw.json("task", "move", mail["id"], "Review")
    other = lw.json("task", "create", "--workflow", "Kanban", "--title", "Water the plants")
    return mail, other


def test_watch_replays_as_readable_lines_and_as_json_lines(laneway: Laneway) -> None:
    lw = laneway
    mail, other = _board(lw)

    text = lw.run("watch", "--since", "0", "--count", "3")
    assert text.exit_code == 0, text.stderr
    created, moved, created_other = text.stdout.splitlines()
    assert " task.created " in created
    assert f"{mail['id'][-8:]} 'Sort the mail'  created at In Progress" in created
    assert moved.endswith(f"{mail['id'][-8:]} 'Sort the mail'  In Progress -> Review (E2)")
    assert "'Water the plants'" in created_other
    assert text.stderr.startswith("laneway watch: events on ")

    lines = lw.run("--json", "events", "--since", "0", "--count", "3").stdout.splitlines()
    stream = [json.loads(line) for line in lines]
    assert [e["type"] for e in stream] == ["task.created", "task.moved", "task.created"]
    assert [e["id"] for e in stream] == sorted(e["id"] for e in stream)
    assert stream[1]["task_id"] == mail["id"]
    assert stream[1]["to_step_id"] == lw.json("task", "show", mail["id"])["workflow_step_id"]
    assert set(stream[1]) >= {"id", "type", "task_id", "at", "from_step_id", "entry_path"}
    # the local --json is the global one; --task narrows (a suffix names the task)
    mine = lw.run("watch", "--json", "--task", mail["id"][-8:], "--since", "0", "--count", "2")
    assert [json.loads(x)["task_id"] for x in mine.stdout.splitlines()] == [mail["id"]] * 2
    # --since replays only what came after that id
    after = lw.run("--json", "watch", "--since", str(stream[1]["id"]), "--count", "1")
    assert json.loads(after.stdout)["task_id"] == other["id"]
    assert "no task" in lw.fails("watch", "--task", "Nothing like it")


def _lines(stream: Any, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line.rstrip("\n"))


def _next(lines: queue.Queue[str], deadline: float) -> str:
    return lines.get(timeout=max(0.0, deadline - time.monotonic()))


@pytest.mark.slow
def test_watch_follows_from_now_until_ctrl_c(db_url: str, tmp_path: Path) -> None:
    """A real process on the database: the events other processes commit after it started
    arrive, those of another task do not, and SIGINT ends it with exit 0 and no traceback."""
    lw = Laneway(db_url)
    lw.json("init")
    mail, other = _board(lw)
    proc = subprocess.Popen(
        [laneway_script(), "--db", db_url, "--json", "watch", "--task", mail["id"]],
        cwd=tmp_path,
        env=script_env({"LANEWAY_PLUGINS_ALLOW": "kanban,office"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: queue.Queue[str] = queue.Queue()
    err: queue.Queue[str] = queue.Queue()
    for stream, into in ((proc.stdout, out), (proc.stderr, err)):
        threading.Thread(target=_lines, args=(stream, into), daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        started = json.loads(_next(err, deadline))
        assert started["task_id"] == mail["id"]
        with open_host(db_url) as host:
            host.tasks.move(other["id"], "Review")  # another task: not shown
            host.tasks.move(mail["id"], "Done")
        event = json.loads(_next(out, deadline))
        # from now: nothing of what happened before it started, nothing of the other task
        assert event["id"] > started["after"]
        assert (event["type"], event["task_id"]) == ("task.moved", mail["id"])
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    leftover = []
    while not err.empty():
        leftover.append(err.get())
    assert not any("Traceback" in line or "interrupted" in line for line in leftover), leftover
