"""Issue 41 item 5, AGENTS.md "Phase 4": a conversation continues with `session/resume` when
the agent offers it, else `session/load`, else a new one (`conversation lost`); laneway sends
`session/close` when it ends a conversation (the task archived, deleted or at its terminal step,
the worker's limit of live conversations, the worker stopping), and only to an agent that offers
it. `session list --json` says which way the conversation was taken up (`agent.continued_by`).

The fake ACP agent (tests/agents/fake_acp_agent.py) offers resume and close as its script says
and logs every session request it gets, so each test reads what the agent itself was sent.
Every turn runs through a real `laneway worker` process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import laneway, laneway_script, script_env
from tests.agents.test_acp_worker import Board, echoes, messages, warnings

pytestmark = pytest.mark.slow

WAIT_S = 60.0


def _log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _methods(path: Path) -> list[str]:
    return [entry["method"] for entry in _log(path)]


def _session_list(board: Board) -> dict[str, Any]:
    done = laneway(
        "--db", board.url, "--json", "session", "list", "--task", board.task_id, cwd=board.tmp_path
    )
    assert done.returncode == 0, done.stderr
    (session,) = json.loads(done.stdout)
    return dict(session)


def _script(tmp_path: Path, **caps: Any) -> dict[str, Any]:
    state = tmp_path / "conversations"
    state.mkdir(exist_ok=True)
    return {"state_dir": str(state), "log": str(tmp_path / "agent.log"), "turns": [[]], **caps}


# -- resume vs load vs lost -------------------------------------------------------------------


@pytest.mark.one_database  # the protocol's corner; the board's part is the same on both
@pytest.mark.parametrize(
    ("caps", "continued_by"),
    [
        ({"resume_session": True, "load_session": True}, "resume"),
        ({"resume_session": True, "load_session": False}, "resume"),
        ({"resume_session": False, "load_session": True}, "load"),
        ({"resume_session": True, "load_session": True, "resume": "error"}, "load"),
    ],
    ids=["resume-preferred", "resume-only", "load-only", "resume-refused-then-load"],
)
def test_issue_41_item_5_a_new_worker_resumes_when_offered_else_loads(
    db_url: str, tmp_path: Path, caps: dict[str, Any], continued_by: str
) -> None:
    """The second turn is taken by a second worker process: the conversation goes on (the
    agent remembers the first prompt) by `session/resume` when the agent offers it — nothing
    replayed, no `session/load` sent — else by `session/load`; `session list --json` says
    which (`agent.continued_by`)."""
    log = tmp_path / "agent.log"
    board = Board(db_url, tmp_path, _script(tmp_path, **caps))
    board.work("--max-runs", "1")
    assert _session_list(board)["agent"]["continued_by"] == "new"
    board.work()
    _step, session, items = board.read()
    said = echoes(items)
    assert len(said) == 2
    assert said[1].endswith("(previous: work on it)")  # the agent remembered the first turn
    assert not [w for w in warnings(items) if "conversation lost" in w]
    second = [e for e in _log(log) if e["pid"] != _log(log)[0]["pid"]]
    sent = [e["method"] for e in second]
    acp_id = session.agent["acp_session_id"]
    if continued_by == "resume":
        assert ("session/resume", acp_id) in [(e["method"], e["session_id"]) for e in second]
        assert "session/load" not in sent
    else:
        assert "session/load" in sent
    assert "session/new" not in sent
    assert _session_list(board)["agent"]["continued_by"] == continued_by
    # session/load replays the conversation; neither way is it transcript again
    assert [i["text"] for i in items if i["kind"] == "prompt"].count("work on it") == 1


@pytest.mark.one_database
def test_issue_41_item_5_neither_resume_nor_load_is_a_lost_conversation(
    db_url: str, tmp_path: Path
) -> None:
    """An agent that offers neither: a new ACP session, one WARNING `conversation lost`, and
    `continued_by` is `new`."""
    log = tmp_path / "agent.log"
    board = Board(db_url, tmp_path, _script(tmp_path))
    board.work("--max-runs", "1")
    board.work()
    _step, _session, items = board.read()
    assert echoes(items)[1].endswith("(previous: None)")
    assert len([w for w in warnings(items) if w == "conversation lost"]) == 1
    assert _methods(log).count("session/new") == 2
    assert "session/resume" not in _methods(log)
    assert _session_list(board)["agent"]["continued_by"] == "new"


# -- session/close on every path ----------------------------------------------------------------

STAY = textwrap.dedent(
    """\
    id: stay
    name: Stay
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
          on_turn_complete: [{"type": "move_to_next"}]
      - id: next
        name: Next
        position: 2
        allow_manual_move: true
      - id: done
        name: Done
        position: 3
        allow_manual_move: true
    """
)
"""Work (one turn) -> Next, where the task rests with its conversation kept by the worker;
a move to Done (the terminal step) ends it."""


class Worker:
    """A long-running `laneway worker` (not --once), stopped by SIGTERM."""

    def __init__(self, board: Board, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [laneway_script(), "--db", board.url, "--log-json", "worker"],
            cwd=board.tmp_path,
            env=script_env(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        _out, err = self.proc.communicate(timeout=60)
        return err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _ended(err: str) -> list[dict[str, Any]]:
    """The worker's `conversation ended` records (their fields), from its JSON log lines."""
    found = []
    for line in err.splitlines():
        try:
            record = json.loads(line)["record"]
        except (ValueError, KeyError, TypeError):
            continue
        if record.get("message") == "conversation ended":
            found.append(dict(record["extra"]))
    return found


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


def _wait(what: str, ready: Any, worker: Worker | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        assert worker is None or worker.alive(), f"the worker ended before {what}"
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def _closed(log: Path, acp_id: str) -> bool:
    return ("session/close", acp_id) in [(e["method"], e["session_id"]) for e in _log(log)]


def _rested(board: Board, log: Path) -> str:
    """The turn has ended and the task rests at Next: the conversation's ACP session id."""

    def resting() -> bool:
        step, session, _items = board.read()
        return step == "Next" and session.state == "WAITING_FOR_INPUT"

    _wait("the turn to end", resting)
    _wait("the agent's prompt", lambda: "session/prompt" in _methods(log))
    _step, session, _items = board.read()
    return str(session.agent["acp_session_id"])


@pytest.mark.one_database
@pytest.mark.parametrize("how", ["archive", "delete", "terminal"])
def test_issue_41_item_5_ending_a_task_closes_its_kept_conversation(
    db_url: str, tmp_path: Path, how: str
) -> None:
    """Archiving or deleting the task, or moving it to its terminal step, ends its conversation:
    the worker that keeps it sends `session/close` (while it runs on: not at its shutdown) and
    stops the agent."""
    log = tmp_path / "agent.log"
    board = Board(db_url, tmp_path, _script(tmp_path, close_session=True), yaml=STAY)
    worker = Worker(board)
    try:
        acp_id = _rested(board, log)
        time.sleep(1.5)  # a sweep or two: nothing ends a conversation whose task goes on
        assert not _closed(log, acp_id)
        if how == "terminal":
            args = ["task", "move", board.task_id, "Done"]
        else:
            args = ["task", how, board.task_id]
        done = laneway("--db", db_url, *args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        _wait("session/close", lambda: _closed(log, acp_id), worker)
        assert worker.alive()
    finally:
        err = worker.stop()
    assert _methods(log).count("session/close") == 1, err
    why = "deleted" if how == "delete" else "archived" if how == "archive" else "terminal"
    assert [(e["why"], e["session_close"]) for e in _ended(err)] == [(why, True)], err


@pytest.mark.one_database
def test_issue_41_item_5_the_live_limit_closes_the_least_recent_conversation(
    db_url: str, tmp_path: Path
) -> None:
    """A worker keeping at most one conversation (LANEWAY_ACP_LIVE_CONVERSATIONS=1): the second
    task's turn ends the first task's conversation with `session/close`."""
    log = tmp_path / "agent.log"
    board = Board(db_url, tmp_path, _script(tmp_path, close_session=True), yaml=STAY)
    worker = Worker(board, {"LANEWAY_ACP_LIVE_CONVERSATIONS": "1"})
    try:
        first = _rested(board, log)
        other = laneway(
            "--db", db_url, "--json", "task", "create", "--workflow", "stay", "--title", "Two",
            "--step", "Backlog", cwd=tmp_path,
        )  # fmt: skip
        assert other.returncode == 0, other.stderr
        second_task = json.loads(other.stdout)["id"]
        started = laneway("--db", db_url, "task", "start", second_task, cwd=tmp_path)
        assert started.returncode == 0, started.stderr
        _wait("the first conversation closed", lambda: _closed(log, first), worker)
        assert worker.alive()
        assert _methods(log).count("session/new") == 2
    finally:
        err = worker.stop()
    assert next((e["why"], e["session_close"]) for e in _ended(err)) == ("limit", True), err


@pytest.mark.one_database
@pytest.mark.parametrize("offered", [True, False], ids=["close-offered", "close-not-offered"])
def test_issue_41_item_5_a_stopping_worker_closes_its_conversations_only_if_offered(
    db_url: str, tmp_path: Path, offered: bool
) -> None:
    """The worker stopping ends the conversations it keeps: `session/close` to an agent that
    offers it; to one that does not, nothing is sent (it is stopped as before)."""
    log = tmp_path / "agent.log"
    board = Board(db_url, tmp_path, _script(tmp_path, close_session=offered), yaml=STAY)
    worker = Worker(board)
    try:
        acp_id = _rested(board, log)
        assert not _closed(log, acp_id)
    finally:
        err = worker.stop()
    assert worker.proc.returncode == 0, err
    assert _closed(log, acp_id) is offered, err
    assert [(e["why"], e["session_close"]) for e in _ended(err)] == [("shutdown", offered)], err
    if not offered:
        assert "session/close" not in _methods(log)


@pytest.mark.one_database
def test_issue_41_item_5_no_close_is_sent_on_any_path_when_not_offered(
    db_url: str, tmp_path: Path
) -> None:
    """Archive, then the worker stopping, with an agent that does not offer `session/close`:
    the conversation ends (its agent stopped) and the agent is sent no `session/close`."""
    log = tmp_path / "agent.log"
    board = Board(db_url, tmp_path, _script(tmp_path, close_session=False), yaml=STAY)
    worker = Worker(board)
    try:
        _rested(board, log)
        (agent_pid,) = {e["pid"] for e in _log(log)}
        done = laneway("--db", db_url, "task", "archive", board.task_id, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        _wait("the agent stopped", lambda: _gone(agent_pid), worker)
    finally:
        err = worker.stop()
    assert "session/close" not in _methods(log), err
    assert [(e["why"], e["session_close"]) for e in _ended(err)] == [("archived", False)], err


@pytest.mark.one_database
def test_issue_41_item_5_a_resume_only_agent_is_restarted_between_runs_and_resumed(
    db_url: str, tmp_path: Path
) -> None:
    """One worker takes both runs: an agent that offers `session/resume` (and not load) is
    restarted for the second run, so its LANEWAY_RUN_ID is that run's (AGENTS.md "Phase 4"),
    and the conversation goes on by `session/resume`, not `session/close`d (it is not over)."""
    log = tmp_path / "agent.log"
    script = _script(tmp_path, resume_session=True, close_session=True)
    board = Board(db_url, tmp_path, {**script, "turns": [[{"env_value": "LANEWAY_RUN_ID"}]]})
    worker = Worker(board)
    try:
        _wait("the second run's turn", lambda: _methods(log).count("session/prompt") == 2, worker)
        _wait("the task at Done", lambda: board.read()[0] == "Done", worker)
        _step, session, items = board.read()
    finally:
        err = worker.stop()
    entries = _log(log)
    pids = [e["pid"] for e in entries if e["method"] == "session/prompt"]
    assert len(set(pids)) == 2, err  # a process per run
    assert next(e["method"] for e in entries if e["pid"] == pids[1]) == "session/resume"
    assert echoes(items)[1].endswith("(previous: work on it)")
    run_ids = {i["run_id"] for i in items if i["kind"] == "prompt"}
    said = re.findall(r"LANEWAY_RUN_ID=([0-9a-f-]+)", messages(items))
    assert len(said) == 2
    assert set(said) == run_ids
    # closed once, at the end (Done is the terminal step, or the worker stopping), never between
    closes = [e for e in entries if e["method"] == "session/close"]
    assert [e["pid"] for e in closes] == [pids[1]], err
    assert session.agent["continued_by"] == "resume"
