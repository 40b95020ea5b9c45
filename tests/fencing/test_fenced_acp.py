"""Issue 27 item 1, ACP: a worker whose liveness lock is lost while an ACP agent works (the
worker running, not paused) tells the agent `session/cancel` and kills its process group at
once - without the 10 s grace a person's cancel gives an agent to end its turn, for the run
may be another worker's the moment others find the epoch dead. The fake agent here ignores
the cancel (it naps through it). Fails on the main this test was written on: the agent lived
on for the grace (~10 s), beside the run's next execution."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from core.agents import worker
from core.agents.protocols.acp import facade
from tests.agents.test_acp_worker import Board
from tests.conftest import eventually, open_host
from tests.fencing.test_fencing import take_lock_away

WAIT_S = 30.0


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            letter = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    return None if letter == "Z" else letter


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_item1_a_fenced_acp_agent_is_killed_without_its_grace(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock taken away mid-turn: the ACP agent's process is gone at once (the watcher's
    quarter-second look, the cancel, the kill: about a second), not after the cancel's grace.
    The grace is ten minutes here, so a loaded machine cannot blur the two (issue 38 item 20:
    no timed bound it can miss)."""
    monkeypatch.setattr(facade, "CANCEL_GRACE", 600.0)
    board = Board(db_url, tmp_path, {"turns": [[{"message": "working on it"}, {"sleep": 120}]]})

    def mid_turn() -> object:
        _step, session, items = board.read()
        return any("working on it" in i["text"] for i in items) and session

    with open_host(db_url) as a:
        # one claim: the run, given up, is left in the queue (its re-execution is not the point)
        working = threading.Thread(
            target=worker.work, args=(a,), kwargs={"once": True, "max_runs": 1}
        )
        working.start()
        try:
            session = eventually(mid_turn, timeout=WAIT_S, what="the ACP turn", every=0.05)
            agent = int(session.agent["acp_session_id"].split("-")[1])  # the fake's fake-PID-N
            assert _state(agent) is not None
            lost = time.monotonic()
            take_lock_away(a)
            eventually(
                lambda: _state(agent) is None, timeout=WAIT_S, what="the agent killed", every=0.02
            )
            killed_in = time.monotonic() - lost
        finally:
            working.join(WAIT_S)
        assert not working.is_alive()
    print(f"killed_in={killed_in:.2f}s")
    assert killed_in < 60
