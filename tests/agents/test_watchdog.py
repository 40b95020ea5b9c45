"""Issue 27 item 1: the agent watchdog's reading of /proc and its decisions (core.agents.watchdog),
and its loop against real processes and real signals, without a worker or a database: a paused
worker's agents are stopped with it, resumed only on the worker's word (those it names are
killed instead), and killed when it is gone.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.agents import watchdog, watchdog_link
from core.agents.watchdog import Watch, parse_stat
from tests.conftest import eventually

PROC = Path("/proc/self/stat").exists()


def _stat(comm: bytes, state: bytes = b"S", ppid: int = 7, pgrp: int = 9) -> bytes:
    rest = [state, str(ppid).encode(), str(pgrp).encode()] + [b"0"] * 16 + [b"12345", b"0"]
    return b"42 (" + comm + b") " + b" ".join(rest) + b"\n"


def test_a_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    assert parse_stat(_stat(b"a) (T b", b"T", 3, 4)) == ("T", 3, 4, 12345)
    assert parse_stat(_stat(b"python3", b"t")) == ("t", 7, 9, 12345)
    with pytest.raises(ValueError, match="stat"):
        parse_stat(b"42 (truncated")


def test_registered_groups_are_stopped_when_the_worker_stops_and_only_then() -> None:
    w = Watch()
    assert not w.polling  # nothing live: it waits on the pipe alone
    assert w.heard("~") == []
    assert w.polling  # a start announced: it watches the worker from now
    w.heard("+100")
    w.heard("~")
    w.heard("+200")
    assert w.saw("S", lambda: ()) == []
    assert w.saw("R", lambda: ()) == []
    assert w.saw("T", lambda: ()) == [("stop", frozenset({100, 200}))]
    assert w.saw("T", lambda: ()) == []  # once per pause
    w.heard("-200")
    assert w.heard("+300") == [("stop", frozenset({300}))]  # written just before the stop


def test_a_traced_stop_counts_as_a_stop() -> None:
    w = Watch()
    w.heard("+100")
    assert w.saw("t", lambda: ()) == [("stop", frozenset({100}))]


def test_the_worker_is_asked_before_anything_runs_on_and_named_groups_die() -> None:
    w = Watch()
    w.heard("+100")
    w.heard("+200")
    w.saw("T", lambda: ())
    assert w.saw("S", lambda: ()) == [("say", frozenset({1}))]  # asks; resumes nothing
    assert w.saw("R", lambda: ()) == []  # still waiting for its word
    assert w.heard("resume 1 200") == [("kill", frozenset({200})), ("cont", frozenset({100}))]
    assert w.groups == {100}
    assert w.heard("resume 1") == []  # answered once


def test_an_answer_to_an_earlier_pause_resumes_nothing() -> None:
    """Stopped again before it answered: its answer was checked before the second pause, so
    only the answer to the second pause resumes the agents."""
    w = Watch()
    w.heard("+100")
    w.saw("T", lambda: ())
    w.saw("R", lambda: ())
    w.heard("+300")  # started between the pauses, running
    assert w.saw("T", lambda: ()) == [("stop", frozenset({300}))]
    assert w.saw("R", lambda: ()) == [("say", frozenset({2}))]
    assert w.heard("resume 1") == []
    assert w.heard("resume 2") == [("cont", frozenset({100, 300}))]


def test_a_pause_with_nothing_stopped_asks_nothing() -> None:
    w = Watch()
    w.heard("+100")
    w.heard("-100")
    assert w.saw("T", lambda: ()) == []
    assert w.saw("R", lambda: ()) == []
    assert not w.polling


def test_an_unconfirmed_start_has_the_workers_children_stopped_too() -> None:
    """Stopped between starting an agent and saying so: the group leaders among its children
    are stopped (and asked only then)."""
    asked: list[bool] = []

    def children() -> list[int]:
        asked.append(True)
        return [500]

    w = Watch()
    w.heard("+100")
    w.saw("T", children)
    assert asked == []
    w.saw("R", lambda: ())
    w.heard("resume 1")
    w.heard("~")
    assert w.saw("T", children) == [("stop", frozenset({100, 500}))]


def test_a_failed_start_and_a_line_nobody_writes_change_nothing() -> None:
    w = Watch()
    w.heard("~")
    w.heard("!")
    for junk in ("", "+x", "-", "resume", "resume a", "hello"):
        assert w.heard(junk) == []
    assert not w.polling


def test_a_worker_gone_has_every_group_killed() -> None:
    w = Watch()
    w.heard("+100")
    w.saw("T", lambda: ())
    w.heard("+200")
    assert w.gone() == [("kill", frozenset({100, 200}))]
    assert w.gone() == []


def _state(pid: int) -> str | None:
    stat = watchdog.read_stat(pid)
    return None if stat is None or stat[0] in "ZX" else stat[0]


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.mark.slow  # it starts a process: the subprocess tier
@pytest.mark.skipif(not PROC, reason="needs /proc")
def test_the_loop_stops_asks_resumes_and_kills_real_processes(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    """`serve` on real processes: a `sleep` stands for the worker, another (in a group of its
    own) for its agent; a stop of the one stops the other, the worker's word resumes it, and
    the worker's end of the pipe closed kills it."""
    fake_worker = subprocess.Popen(["sleep", "60"])
    agent = subprocess.Popen(["sleep", "60"], process_group=0)
    sleepers += [fake_worker, agent]
    words_r, words_w = os.pipe()
    reply_r, reply_w = os.pipe()
    loop = threading.Thread(target=watchdog.serve, args=(fake_worker.pid, words_r, reply_w))
    loop.start()
    try:
        os.write(words_w, f"~\n+{agent.pid}\n".encode())
        time.sleep(0.05)
        assert _state(agent.pid) == "S"
        os.kill(fake_worker.pid, signal.SIGSTOP)
        eventually(
            lambda: _state(agent.pid) == "T", timeout=5, what="the agent stopped", every=0.005
        )
        os.kill(fake_worker.pid, signal.SIGCONT)
        assert select.select([reply_r], [], [], 5)[0]
        assert os.read(reply_r, 100) == b"woke 1\n"
        time.sleep(0.1)
        assert _state(agent.pid) == "T"  # not resumed on its own
        os.write(words_w, b"resume 1\n")
        eventually(
            lambda: _state(agent.pid) == "S", timeout=5, what="the agent resumed", every=0.005
        )
        os.close(words_w)  # the worker's end: gone
        loop.join(timeout=5)
        assert not loop.is_alive()
        eventually(lambda: _state(agent.pid) is None, timeout=5, what="the agent killed")
    finally:
        os.kill(fake_worker.pid, signal.SIGCONT)
        if loop.is_alive():
            fake_worker.kill()
            loop.join(timeout=5)
        for fd in (words_r, reply_r, reply_w):
            os.close(fd)


@pytest.mark.slow  # it starts a process: the subprocess tier
@pytest.mark.skipif(not PROC, reason="needs /proc")
def test_the_watchdog_is_a_session_of_its_own_without_the_workers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It never holds the database URL or any secret; a stop of the worker's group or terminal
    does not reach it; it ends with the worker's end of the pipe."""
    monkeypatch.setenv("LANEWAY_DB", "postgresql://u:secret@db/x")
    link = watchdog_link.Link()
    try:
        pid = eventually(lambda: link.proc and link.proc.pid, timeout=10, what="the watchdog")
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert b"secret" not in environ
        assert {e.split(b"=")[0] for e in environ.split(b"\0") if e} <= {b"LD_LIBRARY_PATH"}
        assert os.getsid(pid) == pid != os.getsid(0)
    finally:
        link.close()
    assert link.proc is not None
    assert link.proc.wait(timeout=5) == 0


def test_the_guarantee_states_the_watchdogs_bound() -> None:
    """docs/guarantees.md names the bound the watchdog keeps (its poll) and what happens on a
    wake with the lock lost, in the words of the bullet these tests check."""
    root = Path(__file__).resolve().parents[2]
    text = " ".join((root / "docs" / "guarantees.md").read_text().split())
    ms = round(watchdog.POLL_S * 1000)
    assert f"paused worker's agents are paused within {ms} ms of it and resumed with it" in text
    assert "when it wakes with its lock lost its watcher stops them before they run on" in text
    assert "no run's agent runs beside its next execution" in text


@pytest.mark.slow  # it starts a process: the subprocess tier
@pytest.mark.skipif(not PROC, reason="needs /proc")
def test_the_workers_children_that_lead_a_group_are_found(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    """What a stop between an agent's start and its registration stops: the group leaders
    among the worker's children (an agent), not a child in the worker's own group (a git
    command), nor the watchdog itself."""
    leader = subprocess.Popen(["sleep", "60"], process_group=0)
    member = subprocess.Popen(["sleep", "60"])
    dog = subprocess.Popen(["sleep", "60"], start_new_session=True)
    sleepers += [leader, member, dog]
    found = watchdog.child_groups(os.getpid(), own=dog.pid)
    assert leader.pid in found
    assert member.pid not in found
    assert dog.pid not in found
