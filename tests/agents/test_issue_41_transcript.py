"""Issue 41 item 8, a transcript a person can read: streamed message and thought chunks joined
as the agent meant them (one item per message, ended at a boundary: the other kind, another
message's `messageId`, a tool call, the turn's end; cut only at the item's bound), and one
prompt item per turn, even when the turn is sent again (a transient retry, the run re-queued
after its worker was killed) - the database decides, by a conditional insert.

The turns run through a real `laneway worker` process, with tests/agents/fake_acp_agent.py
streaming chunks (`{"chunks": [...], "message_id": ID, "pause": S}`) as an adapter does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import Host
from core.store import tables as t
from core.text import MAX_TEXT
from tests.agents.conftest import laneway_script, run_rows, script_env, session_with_run
from tests.agents.test_acp_crash import _gone
from tests.agents.test_acp_worker import Board, echoes
from tests.conftest import wait_for_dead_processes


def _said(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(kind, text) of what the agent said and did, its prompt echo left out."""
    return [
        (i["kind"], i["text"])
        for i in items
        if i["kind"] in ("message", "thought", "tool_call") and not i["text"].startswith("echo: ")
    ]


@pytest.mark.slow
@pytest.mark.one_database  # the client's joining; the board's writes are the same on both
def test_issue_41_item_8_streamed_chunks_of_one_message_are_one_item(
    db_url: str, tmp_path: Path
) -> None:
    """Chunks of one message, paused longer than a stream's jitter, are one item; a thought,
    another message, a tool call end it; the turn's end flushes the last one."""
    pause = 0.5  # past the 0.2 s that ends an unmarked message: a marked one goes on
    steps = [
        {"chunks": ["Let me ", "look at ", "the tests."], "message_id": "m1", "pause": pause},
        {"chunks": ["The login ", "test sleeps."], "kind": "thought", "message_id": "t1",
         "pause": pause},
        {"chunks": ["Found ", "it."], "message_id": "m2", "pause": pause},
        {"chunks": ["Fixing ", "now."], "message_id": "m3", "pause": pause},
        {"tool_call": {"id": "c1", "title": "Edit tests/test_login.py", "kind": "edit"}},
        {"chunks": ["Done: ", "it waits ", "for the server."], "message_id": "m4",
         "pause": pause},
    ]  # fmt: skip
    board = Board(db_url, tmp_path, {"turns": [steps, []]})
    board.work()
    _step, _session, items = board.read()
    first_run = items[0]["run_id"]
    said = _said([i for i in items if i["run_id"] == first_run])
    assert said == [
        ("message", "Let me look at the tests."),
        ("thought", "The login test sleeps."),
        ("message", "Found it."),
        ("message", "Fixing now."),
        ("tool_call", "Edit tests/test_login.py pending"),
        ("message", "Done: it waits for the server."),
    ]


@pytest.mark.slow
@pytest.mark.one_database
def test_issue_41_item_8_a_message_longer_than_an_item_goes_on_in_the_next(
    db_url: str, tmp_path: Path
) -> None:
    """The bound stands: a message of more than MAX_TEXT characters is kept whole, in items of
    at most MAX_TEXT each, cut where a chunk ends (no item says it was cut)."""
    chunk = "x" * (MAX_TEXT // 3)
    steps = [{"chunks": [chunk] * 5, "message_id": "long"}]
    board = Board(db_url, tmp_path, {"turns": [steps, []]})
    board.work()
    _step, _session, items = board.read()
    first_run = items[0]["run_id"]
    texts = [text for kind, text in _said([i for i in items if i["run_id"] == first_run])]
    assert "".join(texts) == chunk * 5
    assert [len(t) for t in texts] == [len(chunk) * 3, len(chunk) * 2]


def _prompts(items: list[dict[str, Any]]) -> list[str]:
    return [i["text"] for i in items if i["kind"] == "prompt"]


@pytest.mark.slow
def test_issue_41_item_8_a_transient_retry_keeps_one_prompt_item(
    db_url: str, tmp_path: Path
) -> None:
    """A busy provider: the turn is tried again and its prompt sent again (the agent echoes it
    twice), yet the transcript keeps the turn's prompt once."""
    busy = {"error": {"code": -32603, "message": "rate limited", "data": {"retryAfterMs": 100}}}
    board = Board(db_url, tmp_path, {"turns": [[busy], [], []]})
    board.work(env={"LANEWAY_RETRY_DELAYS": "0.1"})
    step, _session, items = board.read()
    assert step == "Done"
    assert [e for e in echoes(items) if e.startswith("echo: work on it")] == [
        "echo: work on it (previous: None)",
        "echo: work on it (previous: work on it)",
    ]  # sent twice
    assert _prompts(items) == ["work on it", "and now this"]  # kept once


@pytest.mark.slow
def test_issue_41_item_8_a_run_requeued_after_kill_9_keeps_one_prompt_item(
    db_url: str, tmp_path: Path
) -> None:
    """The worker killed mid-turn: the run is re-queued and the next worker sends the same
    turn's prompt again; the transcript keeps it once."""
    conversations = tmp_path / "conversations"
    conversations.mkdir()
    script = {
        "load_session": True,
        "state_dir": str(conversations),
        "turns": [[{"message": "working on it"}, {"sleep": 120}]],
    }
    board = Board(db_url, tmp_path, script)
    worker = subprocess.Popen(
        [laneway_script(), "--db", db_url, "worker", "--once"],
        cwd=tmp_path,
        env=script_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            _step, session, items = board.read()
            if any("working on it" in i["text"] for i in items):
                break
            assert time.monotonic() < deadline, "the agent never started its turn"
            time.sleep(0.2)
        agent_pid = int(session.agent["acp_session_id"].split("-")[1])
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
    deadline = time.monotonic() + 10
    while not _gone(agent_pid):
        assert time.monotonic() < deadline, f"agent {agent_pid} outlived its worker"
        time.sleep(0.05)
    wait_for_dead_processes(db_url)
    (tmp_path / "script.json").write_text(json.dumps({**script, "turns": [[]]}))
    board.work()
    step, _session, items = board.read()
    assert step == "Done"
    assert run_rows(db_url)[0]["attempts"] == 2  # the turn was sent twice
    assert echoes(items)[1] == "echo: work on it (previous: work on it)"
    assert _prompts(items) == ["work on it", "and now this"]


def test_issue_41_item_8_the_board_keeps_a_turns_prompt_once(host: Host, tmp_path: Path) -> None:
    """The store's side: a prompt item of a run's turn already kept is not kept again (no row,
    no `agent.item` event, no seq taken); another turn of the run, or an item of no run, is."""
    _task, session, run = session_with_run(host, tmp_path, title="talk")
    first = host.sessions.append_items(
        session, [("prompt", "go", {"turn": 0}), ("message", "going", {})], run_id=run
    )
    again = host.sessions.append_items(
        session, [("prompt", "go", {"turn": 0}), ("message", "going again", {})], run_id=run
    )
    queued = host.sessions.append_items(session, [("prompt", "go", {"turn": 1})], run_id=run)
    loose = host.sessions.append_items(session, [("prompt", "hi", {}), ("prompt", "hi", {})])
    assert (first, again, queued, loose) == ([1, 2], [3], [4], [5, 6])
    kept = [(i.kind, i.text, dict(i.data)) for i in host.sessions.items(session)]
    assert kept == [
        ("prompt", "go", {"turn": 0}),
        ("message", "going", {}),
        ("message", "going again", {}),
        ("prompt", "go", {"turn": 1}),
        ("prompt", "hi", {}),
        ("prompt", "hi", {}),
    ]
    with host.store.read() as conn:
        events = conn.execute(
            sa.select(sa.func.count()).where(t.board_events.c.type == "agent.item")
        ).scalar()
    assert events == 6
