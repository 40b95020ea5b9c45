"""Hostile ACP agents through a real `laneway worker` (issue 29 tests, "Hostile agents"): garbage
or a 100 MB line on stdout, no answer to `initialize`, a file read outside the working
directory, a request laneway does not serve. Each gets one clear error — a terminal failure,
or a JSON-RPC error back to the agent — in bounded time, the worker goes on, and its memory
stays within a bound of a well-behaved agent's worker (peak RSS, VmHWM, in the same test)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import laneway_script, script_env
from tests.agents.test_acp_worker import Board, messages

pytestmark = pytest.mark.slow

MIB = 1024 * 1024


def _work_measured(board: Board, env: dict[str, str] | None = None) -> tuple[float, int]:
    """`laneway worker --once` on the board: its wall time and peak RSS in bytes."""
    began = time.monotonic()
    proc = subprocess.Popen(
        [laneway_script(), "--db", board.url, "worker", "--once"],
        cwd=board.tmp_path,
        env=script_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except FileNotFoundError:
            break
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) * 1024)
        time.sleep(0.05)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return time.monotonic() - began, peak


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory: pytest.TempPathFactory) -> int:
    """A well-behaved ACP agent's worker, on a SQLite board: the memory bound's base."""
    tmp = tmp_path_factory.mktemp("baseline")
    board = Board(f"sqlite:///{tmp}/board.db", tmp, {"turns": [[{"message": "fine"}]]})
    _wall, peak = _work_measured(board)
    return peak


@pytest.mark.one_database
@pytest.mark.parametrize(
    ("script", "route", "words"),
    [
        ({"turns": [[{"garbage": "this is not JSON-RPC"}]]}, "R1", "this is not JSON-RPC"),
        ({"turns": [[{"huge_line": 100}]]}, "R1", "16777216"),
        ({"init": "hang"}, "R1", "did not answer initialize within 8 s"),
    ],
    ids=["garbage", "100MB-line", "initialize-hangs"],
)
def test_a_broken_agent_is_one_terminal_failure_in_bounded_time_and_memory(
    db_url: str, tmp_path: Path, baseline_rss: int, script: dict[str, Any], route: str, words: str
) -> None:
    board = Board(db_url, tmp_path, script)
    wall, peak = _work_measured(board, {"LANEWAY_ACP_INIT_TIMEOUT": "8"})
    step, session, _items = board.read()
    error = session.metadata["last_agent_error"]
    assert error["route"] == route
    assert words in error["message"]
    assert "\n" not in error["message"]
    assert step == "Trouble"  # on_agent_error ran; the worker went on to finish
    assert wall < 60
    assert peak < baseline_rss + 64 * MIB, (peak, baseline_rss)


@pytest.mark.one_database
def test_a_read_outside_the_working_directory_and_an_unserved_request_are_errors_to_the_agent(
    db_url: str, tmp_path: Path
) -> None:
    """fs/read_text_file outside the session's directory and terminal/create are JSON-RPC
    errors the agent gets back; its turn goes on and ends normally."""
    board = Board(
        db_url, tmp_path, {"turns": [[{"read": "/etc/hostname"}, {"terminal": True}], []]}
    )
    board.work()
    step, _session, items = board.read()
    said = messages(items)
    assert "outside" in said
    assert "error -32601" in said  # method not found: laneway offers no terminal
    assert step == "Done"
