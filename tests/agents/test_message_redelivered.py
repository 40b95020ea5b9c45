"""A person's message survives the worker delivering it: `kill -9` of the worker in the middle
of the turn a `session send` started re-queues the run, and the next worker delivers that same
message again (it was taken off the queue for the dead turn: without it, the run found the
queue empty and finished as if its turn had happened, the message marked delivered and never
acted on)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.agents.conftest import laneway, run_rows
from tests.agents.test_acp_permission_requests import start_worker, wait_for
from tests.agents.test_acp_worker import Board, echoes
from tests.conftest import wait_for_dead_processes

pytestmark = pytest.mark.slow

FLOW = """\
id: talk
name: Talk
steps:
  - id: backlog
    name: Backlog
    position: 0
    allow_manual_move: true
  - id: work
    name: Work
    position: 1
    is_start_step: true
    allow_manual_move: true
    prompt: "work on it"
    events:
      on_enter: [{"type": "auto_start_agent"}]
  - id: next
    name: Next
    position: 2
    allow_manual_move: true
"""
MESSAGE = "please also check the retry logic"
SEND_WINDOW_S = 10
"""How long the first turn lasts after it speaks: the window a message is sent in."""
DYING_SAYS = "looking into it now"
DYING = [{"message": DYING_SAYS}, {"sleep": 120}]
"""The turn the worker is killed in."""


def test_a_message_whose_turn_dies_with_its_worker_is_delivered_again(
    db_url: str, tmp_path: Path
) -> None:
    conversations = tmp_path / "conversations"
    conversations.mkdir()
    base = {"load_session": True, "state_dir": str(conversations)}
    board = Board(db_url, tmp_path, {**base, "turns": [[{"message": "first turn"}]]}, yaml=FLOW)
    board.work()
    _step, session, _items = board.read()
    sent = laneway("--db", db_url, "session", "send", session.id, MESSAGE, cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr

    script = tmp_path / "script.json"
    script.write_text(json.dumps({**base, "turns": [DYING]}))
    _kill_mid_turn(board, db_url)

    script.write_text(json.dumps({**base, "turns": [[]]}))
    board.work()
    _step, session, items = board.read()
    # the fake agent answers a prompt as it gets it: once from the killed turn, once again now
    said = [e for e in echoes(items) if e.startswith(f"echo: {MESSAGE} (previous:")]
    assert len(said) == 2, echoes(items)
    (asked,) = [r for r in run_rows(db_url) if r["reason"] == "user_message"]
    assert (asked["status"], asked["attempts"]) == ("finished", 2)
    assert session.metadata["messages_delivered"] == [MESSAGE]  # taken off the queue once
    assert session.metadata["queued_messages"] == []


def test_a_message_delivered_as_a_runs_next_turn_is_delivered_again_after_kill_9(
    db_url: str, tmp_path: Path
) -> None:
    """A message sent while a turn runs is delivered by that run as its next turn; the run
    re-queued after `kill -9` in that turn delivers the message again (its first turn, which
    had ended, is not run again)."""
    conversations = tmp_path / "conversations"
    conversations.mkdir()
    base = {"load_session": True, "state_dir": str(conversations)}
    first = [{"message": "first turn"}, {"sleep": SEND_WINDOW_S}]
    board = Board(db_url, tmp_path, {**base, "turns": [first, DYING]}, yaml=FLOW)

    def send_during_the_first_turn() -> None:
        wait_for("the first turn", lambda: any("first turn" in i["text"] for i in board.read()[2]))
        session = board.read()[1]
        assert session.state == "RUNNING"
        sent = laneway("--db", db_url, "session", "send", session.id, MESSAGE, cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr

    _kill_mid_turn(board, db_url, before=send_during_the_first_turn)
    (tmp_path / "script.json").write_text(json.dumps({**base, "turns": [[]]}))
    board.work()
    _step, session, items = board.read()
    said = [e for e in echoes(items) if e.startswith(f"echo: {MESSAGE} (previous:")]
    assert len(said) == 2, echoes(items)
    assert [e for e in echoes(items) if e.startswith("echo: work on it")] == [
        "echo: work on it (previous: None)"
    ]
    (run,) = run_rows(db_url)
    assert (run["reason"], run["status"], run["attempts"]) == ("task_assigned", "finished", 2)
    assert session.metadata["messages_delivered"] == [MESSAGE]


def _kill_mid_turn(board: Board, db_url: str, before: Callable[[], None] | None = None) -> None:
    """A worker whose agent reaches the DYING turn, killed there (`kill -9`); then the dead
    worker's epoch seen dead."""
    worker = start_worker(board)
    try:
        if before is not None:
            before()
        wait_for(
            "the message's turn", lambda: any(DYING_SAYS in i["text"] for i in board.read()[2])
        )
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    wait_for_dead_processes(db_url)
