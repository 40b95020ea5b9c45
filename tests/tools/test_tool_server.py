"""AGENTS.md "The tool server: how an agent acts on the board": the worker's ToolBroker and
the real `laneway` MCP server (a subprocess, driven with the MCP client SDK as an agent
drives it) on a real SQLite board."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from core.agents.tools import wire
from core.agents.tools.broker import ToolBroker, mcp_server
from core.host import Host
from core.store import tables as t
from tests.tools.board import call, review_board, reviewer_grant

# What the tool server does is the same whichever database keeps the board; its races (two
# processes deciding at once) are proven on both in tests/agents and tests/multiprocess.
pytestmark = pytest.mark.one_database


@pytest.fixture
def broker(host: Host) -> Iterator[ToolBroker]:
    with ToolBroker(host) as made:
        yield made


def _ok(text: str) -> Any:
    return json.loads(text)


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_decide_records_the_seats_verdict_and_the_quorum_moves_the_task(
    host: Host, broker: ToolBroker
) -> None:
    """`decide` row: the run's seat's verdict, exactly as `{"decision"}` (for the run, so a
    re-run adds nothing); with every reviewer approving, Review's quorum moves the task."""
    board = review_board(host, reviewers=2)
    first = call(
        mcp_server(reviewer_grant(broker, host, board, "r1")),
        ("decide", {"verdict": "approved", "comment": "looks right"}),
        ("decide", {"verdict": "rejected"}),  # the same run again: kept verdict, nothing new
    )
    assert not first[0].is_error, first[0].text
    made = _ok(first[0].text)
    r1_seat = next(
        s
        for s in host.participants.list(step="Review", task=board.task.id)
        if s.agent_profile_id == host.profiles.get("r1").id
    )
    assert made["decision"]["participant_id"] == r1_seat.id
    assert (made["transitioned"], made["recorded"]) == (False, True)
    assert _ok(first[1].text)["recorded"] is False
    stored = host.decisions.list(board.task.id, board.step("Review"))
    assert [(d.participant_id, d.decision, d.comment, d.run_id) for d in stored] == [
        (r1_seat.id, "approved", "looks right", board.run.id)
    ]
    assert host.tasks.get(board.task.id).workflow_step_id == board.step("Review")

    r2_run = next(
        r
        for r in host.runs.list(task=board.task.id)
        if r.agent_profile_id == host.profiles.get("r2").id
    )
    r2 = reviewer_grant(broker, host, board, "r2", run=r2_run)
    (second,) = call(mcp_server(r2), ("decide", {"verdict": "approved"}))
    moved = _ok(second.text)
    assert (moved["transitioned"], moved["to_step_id"]) == (True, board.step("Approval"))
    assert host.tasks.get(board.task.id).workflow_step_id == board.step("Approval")


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_decide_refuses_a_verdict_outside_the_three(host: Host, broker: ToolBroker) -> None:
    board = review_board(host)
    (answer,) = call(
        mcp_server(reviewer_grant(broker, host, board)), ("decide", {"verdict": "meh"})
    )
    assert answer.is_error
    assert host.decisions.list(board.task.id, board.step("Review")) == []


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_complete_step_sets_the_pending_signal(host: Host, broker: ToolBroker) -> None:
    """`complete_step` row: as `{"step_complete": true}`, the session's pending signal for
    the run's step."""
    board = review_board(host)
    (answer,) = call(mcp_server(reviewer_grant(broker, host, board)), ("complete_step", {}))
    assert _ok(answer.text) == {"step_complete": True, "step_id": board.step("Review")}
    metadata = host.sessions.get(board.session.id).metadata
    assert metadata["pending_step_signal"] == board.step("Review")


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_comment_lands_by_the_agent_and_fires_on_comment_once(
    host: Host, broker: ToolBroker
) -> None:
    """`comment` row: a comment by this agent (its profile's name); it fires on_comment at
    the task's step with operation id task_comment:<id> (CLI.md), once: delivering the same
    comment's trigger again is deduplicated by the ledger."""
    board = review_board(host)
    host.tasks.move(board.task.id, "Work")  # Work's on_comment queues a run for the primary
    before = host.runs.list(task=board.task.id)
    (answer,) = call(
        mcp_server(reviewer_grant(broker, host, board)), ("comment", {"text": "Needs a test."})
    )
    made = _ok(answer.text)
    assert set(made) == {"id", "task_id", "author", "body", "created_at", "file", "line", "actor"}
    assert made["actor"] == "agent:r1"  # issue 44 item 3
    assert (made["file"], made["line"]) == (None, None)  # not a line comment (issue 40)
    assert (made["task_id"], made["author"], made["body"]) == (
        board.task.id,
        "r1",
        "Needs a test.",
    )
    assert [c.id for c in host.comments.list(board.task.id)] == [made["id"]]
    with host.store.read() as conn:
        state = conn.execute(
            sa.select(t.applied_operations.c.state).where(
                t.applied_operations.c.operation_id == f"task_comment:{made['id']}"
            )
        ).scalar_one()
    assert state == "applied"
    # Work's on_comment queue_run (reason task_comment) ran once for this comment
    after = host.runs.list(task=board.task.id)
    queued = [r for r in after if r.id not in {b.id for b in before}]
    assert [(r.reason, r.agent_profile_id) for r in queued] == [
        ("task_comment", host.profiles.get("worker").id)
    ]
    assert host.comments.fire(made["id"]).idempotent
    assert host.runs.list(task=board.task.id) == after


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_issue_38_item_2_the_agents_own_comment_does_not_wake_it(
    host: Host, broker: ToolBroker
) -> None:
    """The `comment` tool of the task's primary agent (Work's runner, whom Work's on_comment
    `queue_run target: primary` names): its own comment queues no run of it, so a step that
    keeps its task does not loop for ever; the comment is still there, its trigger applied."""
    board = review_board(host)
    host.tasks.move(board.task.id, "Work")
    before = host.runs.list(task=board.task.id)
    grant = broker.grant(
        task_id=board.task.id,
        step_id=board.step("Work"),
        run_id=board.run.id,
        session_id=board.session.id,
        agent_profile_id=host.profiles.get("worker").id,
    )
    (answer,) = call(mcp_server(grant), ("comment", {"text": "Done, I think."}))
    made = _ok(answer.text)
    assert made["author"] == "worker"
    assert host.operations.is_applied(f"task_comment:{made['id']}")
    assert host.runs.list(task=board.task.id) == before


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_get_task_returns_the_task_the_prompt_and_the_steps_verdicts(
    host: Host, broker: ToolBroker
) -> None:
    """`get_task` row: title, description, step, state, the step's prompt, the verdicts and
    comments given at the step, and the task's comments."""
    board = review_board(host)
    seat = host.participants.list(step="Review", task=board.task.id)[0]
    host.decisions.record(
        board.task.id, "Review", seat.id, "changes_requested", comment="add a test"
    )
    host.comments.add(board.task.id, "please hurry", author="alice")
    (answer,) = call(mcp_server(reviewer_grant(broker, host, board)), ("get_task", {}))
    got = _ok(answer.text)
    review = board.workflow.step("Review")
    assert review is not None
    assert got["task"] == {
        "id": board.task.id,
        "title": "Fix the login",
        "description": "It fails.",
        "state": host.tasks.get(board.task.id).state,
        "step": {"id": review.id, "name": "Review", "prompt": review.prompt},
    }
    assert "It fails." in got["prompt"]
    for line in (board.workflow.prompt + "\n" + review.prompt).replace("{{", "\n").splitlines():
        assert line.split("}}")[-1].strip() in got["prompt"]
    assert [(d["verdict"], d["comment"], d["participant_id"]) for d in got["decisions"]] == [
        ("changes_requested", "add a test", seat.id)
    ]
    assert [(c["author"], c["body"]) for c in got["comments"]] == [("alice", "please hurry")]


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_call_for_another_task_is_refused(host: Host, broker: ToolBroker) -> None:
    """ "a tool call for another task or seat is refused": any tool naming another task."""
    board = review_board(host)
    other = host.tasks.create(workflow=board.workflow.id, title="other")
    answers = call(
        mcp_server(reviewer_grant(broker, host, board)),
        ("comment", {"text": "sneaky", "task_id": other.id}),
        ("decide", {"verdict": "approved", "task_id": other.id}),
        ("get_task", {"task_id": other.id}),
    )
    for answer in answers:
        assert answer.is_error
        assert f"this run acts for task {board.task.id} only" in answer.text
    assert host.comments.list(other.id) == []
    assert host.decisions.list(board.task.id, board.step("Review")) == []


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_seat_the_run_does_not_hold_cannot_decide(host: Host, broker: ToolBroker) -> None:
    """The worker's run holds no deciding seat at Review: its `decide` is refused."""
    board = review_board(host)
    grant = reviewer_grant(broker, host, board, "worker")
    (answer,) = call(mcp_server(grant), ("decide", {"verdict": "approved"}))
    assert answer.is_error
    assert "no deciding seat" in answer.text
    assert host.decisions.list(board.task.id, board.step("Review")) == []


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_revoked_token_is_refused(host: Host, broker: ToolBroker) -> None:
    board = review_board(host)
    grant = reviewer_grant(broker, host, board)
    broker.revoke(grant.token)
    (answer,) = call(mcp_server(grant), ("comment", {"text": "too late"}))
    assert answer.is_error
    assert "unknown or was revoked" in answer.text
    forged = attrs.evolve(grant, token="not-a-token")
    (guessed,) = call(mcp_server(forged), ("get_task", {}))
    assert guessed.is_error
    assert host.comments.list(board.task.id) == []


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_wrong_authkey_is_refused(host: Host, broker: ToolBroker) -> None:
    """Without the broker's key nothing gets through: not a forwarded call, not a direct
    connection to the socket."""
    board = review_board(host)
    grant = reviewer_grant(broker, host, board)
    wrong = attrs.evolve(grant, authkey=bytes(32))
    (answer,) = call(mcp_server(wrong), ("comment", {"text": "no key"}))
    assert answer.is_error
    assert "refused the connection" in answer.text
    with pytest.raises(AuthenticationError):
        Client(grant.address, family="AF_UNIX", authkey=b"x" * 32)
    assert host.comments.list(board.task.id) == []
    # and the broker still serves its granted runs afterwards
    (fine,) = call(mcp_server(grant), ("comment", {"text": "with the key"}))
    assert not fine.is_error, fine.text


def test_the_socket_lives_in_a_private_directory(host: Host, broker: ToolBroker) -> None:
    board = review_board(host)
    grant = reviewer_grant(broker, host, board)
    folder = Path(grant.address).parent
    assert folder.stat().st_mode & 0o777 == 0o700
    broker.close()
    assert not folder.exists()


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_the_servers_environment_and_imports_hold_no_database(
    host: Host, broker: ToolBroker, db_url: str
) -> None:
    """ "The server is handed no database credentials": its mcpServers entry carries exactly
    the socket, the key and the token, and the server process, started with that
    environment, loads no database driver or laneway store module."""
    board = review_board(host)
    server = mcp_server(reviewer_grant(broker, host, board))
    assert (server.name, server.command, server.args) == (
        "laneway",
        sys.executable,
        ["-m", "core.agents.tools"],
    )
    assert sorted(e.name for e in server.env) == sorted(
        [wire.SOCKET_ENV, wire.KEY_ENV, wire.TOKEN_ENV]
    )
    key = next(e.value for e in server.env if e.name == wire.KEY_ENV)
    assert len(bytes.fromhex(key)) == 32
    host_part = db_url.split("://", 1)[1]
    assert all(host_part not in e.value and "://" not in e.value for e in server.env)
    probe = (
        "import json, sys\n"
        "from core.agents.tools import server\n"
        "server.build(server.Channel.from_env())\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {"PATH": os.environ["PATH"], **{e.name: e.value for e in server.env}}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    forbidden = ("sqlalchemy", "psycopg", "sqlite3", "alembic", "core.store", "core.services")
    assert [m for m in loaded if m.split(".")[0] in forbidden or m.startswith(forbidden)] == []
    assert "mcp" in loaded


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_the_server_without_its_environment_says_what_is_missing() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "core.agents.tools"],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    missing = f"{wire.SOCKET_ENV}, {wire.KEY_ENV}, {wire.TOKEN_ENV}"
    expected = (
        f"laneway tool server: {missing} not set "
        "(the worker hands these to the agent in session/new's mcpServers)"
    )
    assert done.stderr.strip().splitlines() == [expected]


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_refused_call_is_logged_with_its_run(
    host: Host, broker: ToolBroker, laneway_logs: list[dict[str, Any]]
) -> None:
    board = review_board(host)
    grant = reviewer_grant(broker, host, board)
    call(mcp_server(grant), ("decide", {"verdict": "approved", "task_id": "elsewhere"}))
    refused = [r["extra"] for r in laneway_logs if r["message"] == "agent tool call refused"]
    assert [(r["task_id"], r["run_id"], r["tool"]) for r in refused] == [
        (board.task.id, board.run.id, "decide")
    ]


HANDED_ON = """
import json, os, sys, time
from multiprocessing.connection import Client
address, authkey, token = sys.argv[1], bytes.fromhex(sys.argv[2]), sys.argv[3]
conn = Client(address, family="AF_UNIX", authkey=authkey)
if os.fork():
    os._exit(0)  # the process that connected ends; its child keeps the connection
time.sleep(0.5)
conn.send_bytes(json.dumps({"token": token, "tool": "get_task", "args": {}}).encode())
print(conn.recv_bytes().decode(), flush=True)
"""


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_connection_outlives_its_process_and_is_answered_no_more(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call is answered only for a process of the run's agent tree, found by the pid of
    the process that connected. Once that process ends its pid may be another's, one of that
    very tree (pid reuse, which the check by pid cannot tell): the connection, pinned to the
    process it came from, is answered no more, whoever holds it now. (The tree check stands
    in for such a reuse here: it finds the pid in the tree.)"""
    from core.agents.tools import broker as module

    monkeypatch.setattr(module, "descends", lambda pid, ancestor, hops=256: True)
    board = review_board(host)
    with ToolBroker(host, owner=lambda grant: os.getpid()) as made:
        grant = reviewer_grant(made, host, board)
        # its output is read to the end: the child that kept the connection writes there too
        done = subprocess.run(
            [sys.executable, "-c", HANDED_ON, grant.address, grant.authkey.hex(), grant.token],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    answer = json.loads(done.stdout)
    assert answer == {"error": "the process that connected has ended"}, done.stderr
