"""`laneway session send`: a message starts a turn when the session waits for input, and is
queued - delivered in order, when the running turn ends - while a turn runs. An external
agent gets the message at once; an agent laneway runs gets it from the worker."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.agents import worker
from tests.agents.conftest import plain_workflow, python_agent
from tests.cli.conftest import Laneway
from tests.conftest import open_host
from tests.interleave import Hold, race

ECHO = python_agent("import sys; print('got:' + sys.stdin.read())")


@pytest.fixture
def lw(db_url: str) -> Laneway:
    lane = Laneway(db_url)
    lane.json("init")
    return lane


def _board(lw: Laneway, tmp_path: Path) -> tuple[str, dict[str, str]]:
    with open_host(lw.url) as host:
        wf = plain_workflow(host, tmp_path)
        host.profiles.add("echo", command=ECHO)
        task = host.tasks.create(workflow=wf, title="talk to me")
        steps = {s.name: s.id for s in host.workflows.by_id(wf).steps}
    return task.id, steps


def _meta(session: dict[str, Any], key: str) -> list[str]:
    return list(session["metadata"].get(key) or [])


def test_external_session_waiting_for_input_starts_a_turn_at_once(
    lw: Laneway, tmp_path: Path
) -> None:
    task, steps = _board(lw, tmp_path)
    session = lw.json("session", "start", task, "--profile", "echo")
    assert session["state"] == "WAITING_FOR_INPUT"

    sent = lw.json("session", "send", session["id"], "one")
    assert sent["id"] == session["id"]
    assert sent["state"] == "RUNNING"
    assert _meta(sent, "messages_delivered") == ["one"]
    assert _meta(sent, "queued_messages") == []
    # on_turn_start fired: Todo's move_to_next took the card to Doing
    assert lw.json("task", "show", task)["workflow_step_id"] == steps["Doing"]
    assert lw.json("runs", "list", "--task", task) == []  # nothing for a worker to do


def test_external_session_running_queues_messages_and_delivers_them_in_order(
    lw: Laneway, tmp_path: Path
) -> None:
    task, steps = _board(lw, tmp_path)
    session = lw.json("session", "start", task, "--profile", "echo")["id"]
    lw.json("session", "send", session, "one")  # starts a turn: RUNNING

    for text in ("two", "three"):
        queued = lw.json("session", "send", session, text)
        assert queued["state"] == "RUNNING"
    assert _meta(queued, "queued_messages") == ["two", "three"]
    assert _meta(queued, "messages_delivered") == ["one"]
    assert lw.json("task", "show", task)["workflow_step_id"] == steps["Doing"]

    lw.json("turn", "complete", task, "--session", session)  # the agent ends its turn
    # The next message starts a turn; the oldest queued one is delivered first.
    sent = lw.json("session", "send", session, "four")
    assert sent["state"] == "RUNNING"
    assert _meta(sent, "messages_delivered") == ["one", "two"]
    assert _meta(sent, "queued_messages") == ["three", "four"]


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_session_laneway_runs_gets_a_user_message_run_the_worker_delivers(
    lw: Laneway, tmp_path: Path
) -> None:
    task, steps = _board(lw, tmp_path)
    with open_host(lw.url) as host:
        session = host.sessions.start(task, profile="echo", external=False).id

    first = lw.json("session", "send", session, "a")
    assert first["state"] == "WAITING_FOR_INPUT"  # the worker starts the turn, not `send`
    assert _meta(first, "queued_messages") == ["a"]
    second = lw.json("session", "send", session, "b")
    assert _meta(second, "queued_messages") == ["a", "b"]
    runs = lw.json("runs", "list", "--task", task)
    assert [(r["reason"], r["status"]) for r in runs] == [("user_message", "queued")]
    assert runs[0]["workflow_step_id"] == steps["Todo"]

    with open_host(lw.url) as host:
        summary = worker.work(host, once=True)
        assert summary.as_dict() == {"claimed": 1, "finished": 1, "failed": 0}
        done = host.sessions.get(session)
        # one turn per message, in the order they were sent
        said = [i.text for i in host.sessions.items(session) if i.kind == "output"]
        assert said == ["got:a", "got:b"]
        assert "transcript" not in done.metadata  # the items are the transcript (issue 38)
        assert list(done.metadata["messages_delivered"]) == ["a", "b"]
        assert list(done.metadata["queued_messages"]) == []
        assert done.state == "WAITING_FOR_INPUT"
        # on_turn_start fired when the worker started the turn
        assert host.tasks.get(task).workflow_step_id == steps["Doing"]


def test_session_laneway_runs_while_running_only_queues(lw: Laneway, tmp_path: Path) -> None:
    task, _steps = _board(lw, tmp_path)
    with open_host(lw.url) as host:
        session = host.sessions.start(task, profile="echo", external=False).id
        host.sessions.set_state(session, "RUNNING")  # a turn in flight in some worker

    sent = lw.json("session", "send", session, "later")
    assert sent["state"] == "RUNNING"
    assert _meta(sent, "queued_messages") == ["later"]
    assert _meta(sent, "messages_delivered") == []
    assert lw.json("runs", "list", "--task", task) == []  # the running turn will deliver it


def test_a_finished_session_takes_no_message(lw: Laneway, tmp_path: Path) -> None:
    task, _steps = _board(lw, tmp_path)
    old = lw.json("session", "start", task, "--profile", "echo")["id"]
    lw.json("session", "start", task, "--profile", "echo")  # completes the first one
    line = lw.fails("session", "send", old, "hello?")
    assert "COMPLETED" in line
    assert "no more messages" in line
    assert "no session 'nope'" in lw.fails("session", "send", "nope", "hi")


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_turn_whose_claim_was_lost_at_its_end_delivers_no_queued_message(
    lw: Laneway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn that ends after its worker lost the run's claim (its liveness lock gone, the
    run another worker's) writes nothing and takes no queued message off the queue: that
    worker delivers it. (It used to go on to the next message, a turn no one owned.) The
    fence is made to answer `claim_lost` at the turn's end; losing the lock for real is
    tests/fencing."""
    from core.agents.stops import InFlight
    from core.agents.turns import TurnLoop

    task, _steps = _board(lw, tmp_path)
    with open_host(lw.url) as host:
        session = host.sessions.start(task, profile="echo", external=False).id
    lw.json("session", "send", session, "a")
    lw.json("session", "send", session, "b")

    ending = threading.local()
    end_turn, fenced = TurnLoop._end_turn, InFlight.fenced

    def end_turn_lost(self: TurnLoop, *args: Any) -> bool:
        ending.now = True
        try:
            return end_turn(self, *args)
        finally:
            ending.now = False

    def fenced_at_the_end(self: InFlight, run_id: str | None) -> str | None:
        return "claim_lost" if getattr(ending, "now", False) else fenced(self, run_id)

    monkeypatch.setattr(TurnLoop, "_end_turn", end_turn_lost)
    monkeypatch.setattr(InFlight, "fenced", fenced_at_the_end)
    with open_host(lw.url) as host:
        worker.work(host, once=True)
        done = host.sessions.get(session)
        said = [i.text for i in host.sessions.items(session) if i.kind == "output"]
    assert said == ["got:a"]
    assert list(done.metadata["queued_messages"]) == ["b"]
    assert list(done.metadata["messages_delivered"]) == ["a"]


def test_two_sends_to_a_waiting_external_session_start_one_turn(
    lw: Laneway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `send`s to an external session waiting for input, at once: one starts the turn
    (its message delivered, the session RUNNING, on_turn_start once), the other's message is
    queued for the turn's end. The session's state is read and the turn started with its row
    locked, in one transaction: a second send that read it waiting before the first one
    started the turn used to start a second one, its message delivered in the middle of the
    first. Here the first send is held just as it takes its message off the queue, while the
    second one is sent."""
    from core.services.sessions import SessionService

    task, steps = _board(lw, tmp_path)
    session = lw.json("session", "start", task, "--profile", "echo")["id"]
    hold = Hold()
    monkeypatch.setattr(
        SessionService, "pop_queued_message", hold.before(SessionService.pop_queued_message)
    )

    def send(text: str) -> Callable[[], None]:
        def sending() -> None:
            with open_host(lw.url) as host:
                host.sessions.send(session, text)

        return sending

    race(hold, send("a"), send("b"))

    shown = lw.json("session", "list", "--task", task)
    (found,) = [s for s in shown if s["id"] == session]
    assert found["state"] == "RUNNING"
    assert _meta(found, "messages_delivered") == ["a"]
    assert _meta(found, "queued_messages") == ["b"]  # for the end of the turn "a" started
    assert lw.json("task", "show", task)["workflow_step_id"] == steps["Doing"]


@pytest.mark.slow  # it starts processes: the subprocess tier
def test_a_retried_message_run_delivers_its_message_again(lw: Laneway, tmp_path: Path) -> None:
    """A person's Retry of a run whose turn failed on their message delivers that message
    again: the retry is a new run naming the old one, and takes over the message the old one
    was delivering. It used to find the queue empty and finish without a turn."""
    task, _steps = _board(lw, tmp_path)
    mark = tmp_path / "failed-once"
    flaky = python_agent(
        f"import os, sys\ntext = sys.stdin.read()\nif not os.path.exists({str(mark)!r}):\n"
        f"    open({str(mark)!r}, 'w').close()\n    sys.exit(3)\nprint('got:' + text)"
    )
    with open_host(lw.url) as host:
        host.profiles.add("flaky", command=flaky)
        session = host.sessions.start(task, profile="flaky", external=False).id
    lw.json("session", "send", session, "please look again")
    with open_host(lw.url) as host:
        worker.work(host, once=True)
    (failed,) = lw.json("runs", "list", "--task", task)
    assert (failed["reason"], failed["status"]) == ("user_message", "failed")

    lw.json("task", "move", task, "Todo")  # where the run was for (its turn's start left it)
    lw.json("runs", "retry", failed["id"])
    with open_host(lw.url) as host:
        worker.work(host, once=True)
        said = [i.text for i in host.sessions.items(session) if i.kind == "output"]
        done = host.sessions.get(session)
    assert said == ["got:please look again"]
    assert list(done.metadata["messages_delivered"]) == ["please look again"]
    retried = [r for r in lw.json("runs", "list", "--task", task) if r["id"] != failed["id"]]
    assert [(r["status"], r["retry_of"]) for r in retried] == [("finished", failed["id"])]
