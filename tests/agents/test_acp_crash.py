"""`kill -9` of a worker in the middle of an ACP turn (issue 29 tests, "Crash"): no agent is
left running, the run is re-queued under the many-processes rules (the dead worker's epoch is
gone), and the next worker continues the conversation by `session/load`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.agents.conftest import laneway_script, run_rows, script_env
from tests.agents.test_acp_worker import Board, echoes, warnings
from tests.conftest import open_host, wait_for_dead_processes

pytestmark = pytest.mark.slow


def _gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped counts: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_kill_9_mid_turn_leaves_no_agent_and_the_next_worker_loads_the_conversation(
    db_url: str, tmp_path: Path
) -> None:
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
        acp_session = session.agent["acp_session_id"]
        agent_pid = int(acp_session.split("-")[1])  # the fake names its sessions fake-PID-N
        assert not _gone(agent_pid)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
    deadline = time.monotonic() + 10
    while not _gone(agent_pid):
        assert time.monotonic() < deadline, f"agent {agent_pid} outlived its worker"
        time.sleep(0.05)
    assert [r["status"] for r in run_rows(db_url)] == ["claimed"]
    wait_for_dead_processes(db_url)

    # the next worker: the agent answers at once now
    (tmp_path / "script.json").write_text(json.dumps({**script, "turns": [[]]}))
    board.work()
    step, session, items = board.read()
    rows = run_rows(db_url)
    first = rows[0]
    assert first["status"] == "finished"
    assert first["attempts"] == 2  # re-queued once, never doubled
    said = echoes(items)
    assert said[1] == "echo: work on it (previous: work on it)"  # the conversation went on
    assert session.agent["acp_session_id"] == acp_session
    assert not [w for w in warnings(items) if "conversation lost" in w]
    assert step == "Done"
    with open_host(db_url, read_only=True) as host:
        assert host.sessions.get(session.id).state == "WAITING_FOR_INPUT"
