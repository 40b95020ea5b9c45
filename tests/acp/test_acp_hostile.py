"""Issue 29 hostile agents: each misbehaviour is one clear error in bounded time and memory."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from core.agents.protocols.acp import AcpError, TranscriptItem, shared_loop
from tests.acp.conftest import FAKE, Start, fake_env, texts


def _hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def start_failure(script: dict[str, object], **options: object) -> AcpError:
    with pytest.raises(AcpError) as caught:
        shared_loop().start_agent([sys.executable, FAKE], env=fake_env(script), **options)  # type: ignore[arg-type]
    return caught.value


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_no_answer_to_initialize_fails_within_the_bound() -> None:
    """ "no answer to `initialize` within a bound": a terminal failure naming the bound."""
    began = time.monotonic()
    error = start_failure({"init": "hang"}, init_timeout=1.5)
    assert time.monotonic() - began < 30  # the agent hangs for ever
    assert (error.end.route, error.end.message) == (
        "R1",
        "the agent did not answer initialize within 1.5 s",
    )


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_garbage_on_stdout_is_one_clear_failure() -> None:
    """ "garbage ... on stdout": R1 saying the line is not JSON-RPC."""
    error = start_failure({"init": "garbage"}, init_timeout=20)
    assert error.end.route == "R1"
    assert error.end.message.startswith(
        "the agent wrote a line that is not JSON-RPC: 'this is not JSON-RPC'"
    )


def test_garbage_mid_turn_ends_the_turn(start: Start, tmp_path: Path) -> None:
    """Garbage during a turn ends it (R1) in bounded time, the agent killed."""
    agent = start({"turns": [[{"garbage": "Traceback (most recent call last):"}]]})
    agent.new_session(tmp_path)
    began = time.monotonic()
    end = agent.prompt("go")
    assert (end.outcome, end.route) == ("failed", "R1")
    assert "not JSON-RPC" in end.message
    assert time.monotonic() - began < 30  # without the cut the turn would never end
    assert not agent.alive


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_100_mb_line_is_one_failure_in_bounded_memory() -> None:
    """ "a 100 MB line on stdout": one clear failure; the reader holds at most about twice the
    line limit (16 MiB), so the process's peak RSS grows by far less than the line."""
    before = _hwm_kib()
    began = time.monotonic()
    error = start_failure({"init": "huge_line", "huge_mb": 100}, init_timeout=60)
    assert error.end.route == "R1"
    assert error.end.message.startswith("the agent wrote a line longer than 16777216 bytes")
    assert time.monotonic() - began < 30
    assert _hwm_kib() - before < 64 * 1024


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_exit_at_initialize_names_the_last_stderr_line() -> None:
    """The process exits before answering: R1 with its exit status and last stderr line."""
    error = start_failure({"init": "exit"})
    assert error.end.route == "R1"
    assert "exit status 3" in error.end.message
    assert "fake agent: giving up at initialize" in error.end.message


def test_a_request_laneway_does_not_serve_is_method_not_found(start: Start, tmp_path: Path) -> None:
    """ "a request laneway does not serve" (terminal/create): a JSON-RPC method-not-found
    error back to the agent, whose turn goes on."""
    agent = start({"turns": [[{"terminal": True}, {"message": " carried on"}]]})
    agent.new_session(tmp_path)
    items: list[TranscriptItem] = []
    assert agent.prompt("go", on_item=items.append).ok
    assert "error -32601: Method not found carried on" in "".join(texts(items))
