"""Issue 41 item 6 through real `laneway worker` processes and the fake ACP agent: an agent asks
a person a question (the tool server's `ask`, AGENTS.md; ACP `elicitation/create`), a person
answers from a separate `laneway question answer` process (CLI.md), and the agent gets the
answer; the wait is not the agent's silence; a worker killed while a question is pending leaves
it `cancelled` (by `laneway recover`, as the next claim's look) and the re-run asks again."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import laneway, run_rows
from tests.agents.test_acp_permission_requests import (
    applied,
    approval_yaml,
    board_events,
    cli,
    cli_json,
    finish,
    start_worker,
    wait_for,
)
from tests.agents.test_acp_worker import Board, messages
from tests.conftest import open_host, wait_for_dead_processes

pytestmark = pytest.mark.slow

ASK = {
    "mcp": {
        "tool": "ask",
        "args": {"question": "Which colour?", "choices": ["red", "blue"]},
        "beat": True,
    }
}
"""The fake agent calls the `laneway` tool server's `ask` and says `mcp ask: RESULT`."""


def pending(board: Board) -> list[dict[str, Any]]:
    return list(cli_json(board, "question", "list", "--state", "pending"))


def said(items: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    """The JSON the fake agent said after `prefix` (its tool result)."""
    text = messages(items)
    start = text.index(prefix) + len(prefix)
    found, _end = json.JSONDecoder().raw_decode(text[start:].lstrip())
    return dict(found)


def test_issue_41_item_6_an_agent_asks_through_the_tool_server_and_a_person_answers(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md `ask` (`question`, `choices`): a question on the board with one field
    `answer` of those choices, the turn waits; a separate `question answer` process refuses an
    answer not among the choices, then answers; the agent gets the answer; the events and
    on_approval_resolved (`question:<id>`) as for permissions."""
    board = Board(db_url, tmp_path, {"turns": [[ASK], []]}, yaml=approval_yaml())
    worker = start_worker(board, env={"LANEWAY_USER": "erin"})
    try:
        (asked,) = wait_for("a pending question", lambda: pending(board))
        assert (asked["task_id"], asked["message"], asked["state"]) == (
            board.task_id,
            "Which colour?",
            "pending",
        )
        assert asked["fields"] == [
            {
                "name": "answer",
                "type": "string",
                "title": "",
                "required": True,
                "choices": ["red", "blue"],
            }
        ]
        (run,) = run_rows(db_url)
        assert (asked["run_id"], run["status"]) == (run["id"], "claimed")
        time.sleep(1.0)  # the turn really waits
        assert worker.poll() is None
        refused = cli(board, "question", "answer", asked["id"], "--field", "answer=green")
        assert refused.returncode == 1
        assert json.loads(refused.stderr.strip())["error"] == (
            'answer field \'answer\': "green" is not one of "red", "blue"'
        )
        done = laneway(
            "--db",
            board.url,
            "--json",
            "question",
            "answer",
            asked["id"][-8:],
            "--field",
            "answer=blue",
            cwd=tmp_path,
            env={"LANEWAY_USER": "frank"},
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["answered_by"] == "user:frank"
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    step, session, items = board.read()
    got = said(items, "mcp ask:")
    assert (got["question_id"], got["state"], got["answer"]) == (asked["id"], "answered", "blue")
    assert got["answered_by"] == "user:frank"
    assert step == "Done"
    again = cli(board, "question", "answer", asked["id"], "--decline")
    assert again.returncode == 1
    assert json.loads(again.stderr.strip())["error"] == (
        f"question {asked['id']} is already answered by user:frank; it cannot be answered"
    )
    ids = {"question_id": asked["id"], "run_id": run["id"]}
    assert board_events(db_url, "question.") == [
        ("question.asked", {**ids, "state": "pending"}),
        ("question.answered", {**ids, "state": "answered"}),
    ]
    assert board_events(db_url, "task.needs_person") == [
        ("task.needs_person", {**ids, "reason": "question"}),
        ("task.needs_person_ended", {**ids, "reason": "question"}),
    ]
    assert applied(db_url, f"question:{asked['id']}") == ["applied"]
    assert session.metadata["workflow_data"] == {"approval": "resolved"}


@pytest.mark.one_database
def test_issue_41_item_6_a_declined_question_tells_the_agent_and_the_wait_is_not_silence(
    db_url: str, tmp_path: Path
) -> None:
    """`question answer ID --decline`: the agent is told `declined`; the turn waited three
    idle timeouts for the person and still finished (the wait is not the agent's silence)."""
    board = Board(db_url, tmp_path, {"turns": [[ASK], []]}, idle_timeout=3.0)
    worker = start_worker(board)
    try:
        (asked,) = wait_for("a pending question", lambda: pending(board))
        time.sleep(9.5)
        assert worker.poll() is None, "\n".join(
            [str((r["status"], r["error_message"], r["finished_at"])) for r in run_rows(db_url)]
            + [str(cli_json(board, "question", "list"))]
            + [f"{i['kind']}: {i['text']}" for i in board.read()[2]]
            + [worker.stderr.read() if worker.stderr else ""]
        )
        declined = cli_json(board, "question", "answer", asked["id"], "--decline")
        assert (declined["state"], declined["answer"]) == ("declined", None)
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    step, _session, items = board.read()
    got = said(items, "mcp ask:")
    assert (got["state"], got["answer"]) == ("declined", None)
    assert step == "Done"


PICK = {
    "elicit": {
        "message": "Which colour?",
        "schema": {
            "properties": {"answer": {"type": "string", "enum": ["red", "blue"]}},
            "required": ["answer"],
        },
    }
}
"""An elicitation asking what ASK asks, with the same one field."""


def test_issue_41_item_6_worker_killed_while_a_question_is_pending(
    db_url: str, tmp_path: Path
) -> None:
    """kill -9 of the worker while its agent waits on a question (the tool server's `ask`):
    the run is re-queued and the question ends `cancelled` (`worker_died`) in that step
    (`laneway recover`); the re-run asks again, and that question is answered and reaches the
    agent."""
    killed_while_asking(db_url, tmp_path, "ask")


@pytest.mark.one_database
def test_issue_41_item_6_worker_killed_while_an_elicitation_is_pending(
    db_url: str, tmp_path: Path
) -> None:
    """As above, the question being an ACP `elicitation/create`."""
    killed_while_asking(db_url, tmp_path, "elicitation")


def killed_while_asking(db_url: str, tmp_path: Path, how: str) -> None:
    board = Board(db_url, tmp_path, {"turns": [[ASK if how == "ask" else PICK], []]})
    worker = start_worker(board)
    try:
        (first,) = wait_for("a pending question", lambda: pending(board))
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert pending(board) == [first]
    wait_for_dead_processes(db_url)
    recovered = laneway("--db", db_url, "recover", cwd=tmp_path)
    assert recovered.returncode == 0, recovered.stderr
    (run,) = run_rows(db_url)
    assert run["status"] == "queued"
    (gone,) = cli_json(board, "question", "list")
    assert (gone["id"], gone["state"], gone["answered_by"]) == (
        first["id"],
        "cancelled",
        "worker_died",
    )
    refused = cli(board, "question", "answer", first["id"], "--field", "answer=red")
    assert refused.returncode == 1
    assert "is already cancelled by worker_died" in refused.stderr

    worker = start_worker(board)
    try:
        (second,) = wait_for("the re-run's question", lambda: pending(board))
        assert second["id"] != first["id"]
        assert second["run_id"] == run["id"]
        cli_json(board, "question", "answer", second["id"], "--field", "answer=red")
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    _step, _session, items = board.read()
    if how == "ask":
        assert said(items, "mcp ask:")["answer"] == "red"
    else:
        assert 'elicit: accept {"answer": "red"}' in messages(items)
    assert [q["state"] for q in cli_json(board, "question", "list")] == ["cancelled", "answered"]
    with open_host(db_url, read_only=True) as host:
        assert host.questions.get(first["id"]).state == "cancelled"


@pytest.mark.one_database
@pytest.mark.parametrize("how", ["ask", "elicitation"])
def test_issue_41_item_6_a_turn_that_ends_while_asking_cancels_the_question(
    db_url: str, tmp_path: Path, how: str
) -> None:
    """A turn that ends while its agent waits on a question (here its turn timeout; 10 s, room
    for the tool server to start on a loaded machine) ends the question `cancelled`; a
    person's later answer is refused naming that state."""
    step = ASK if how == "ask" else PICK
    board = Board(db_url, tmp_path, {"turns": [[step], []]}, turn_timeout=10.0)
    board.work()
    (asked,) = cli_json(board, "question", "list")
    assert asked["state"] == "cancelled"
    assert asked["answered_by"] in ("turn_ended", "run_ended")
    refused = cli(board, "question", "answer", asked["id"], "--field", "answer=red")
    assert refused.returncode == 1
    assert "is already cancelled" in refused.stderr


FORM = {
    "elicit": {
        "message": "How shall I deploy?",
        "schema": {
            "type": "object",
            "properties": {
                "target": {"type": "string", "title": "Target", "enum": ["staging", "prod"]},
                "replicas": {"type": "integer", "title": "Replicas"},
                "dry_run": {"type": "boolean"},
                "note": {"type": "string", "description": "Anything else"},
            },
            "required": ["target", "replicas"],
        },
    }
}
"""The fake agent's elicitation/create in form mode; it says `elicit: ACTION CONTENT`."""


def test_issue_41_item_6_an_acp_elicitation_becomes_a_question_a_person_answers(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md: an agent's `elicitation/create` (form mode; laneway advertises the form
    capability at initialize) becomes a question with the form's fields (type, title,
    required, choices); an answer that does not fit is refused naming the field; a separate
    `question answer` process answers and the agent gets the values, typed."""
    board = Board(db_url, tmp_path, {"turns": [[FORM], []]})
    worker = start_worker(board)
    try:
        (asked,) = wait_for("a pending question", lambda: pending(board))
        assert asked["message"] == "How shall I deploy?"
        assert asked["fields"] == [
            {
                "name": "target",
                "type": "string",
                "title": "Target",
                "required": True,
                "choices": ["staging", "prod"],
            },
            {
                "name": "replicas",
                "type": "integer",
                "title": "Replicas",
                "required": True,
                "choices": [],
            },
            {"name": "dry_run", "type": "boolean", "title": "", "required": False, "choices": []},
            {
                "name": "note",
                "type": "string",
                "title": "Anything else",
                "required": False,
                "choices": [],
            },
        ]
        refused = cli(
            board,
            "question",
            "answer",
            asked["id"],
            "--field",
            "target=prod",
            "--field",
            "replicas=many",
        )
        assert refused.returncode == 1
        assert json.loads(refused.stderr.strip())["error"] == (
            "answer field 'replicas': expected an integer, got \"many\""
        )
        cli_json(
            board,
            "question",
            "answer",
            asked["id"],
            "--field",
            "target=prod",
            "--field",
            "replicas=3",
            "--field",
            "dry_run=true",
        )
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    step, _session, items = board.read()
    assert 'elicit: accept {"dry_run": true, "replicas": 3, "target": "prod"}' in messages(items)
    assert step == "Done"
    (run,) = [r for r in run_rows(db_url) if r["id"] == asked["run_id"]]
    assert run["status"] == "finished"


@pytest.mark.one_database
def test_issue_41_item_6_an_elicitation_laneway_cannot_show_is_declined(
    db_url: str, tmp_path: Path
) -> None:
    """A URL-mode elicitation, or a form with a field of a type laneway cannot ask (a
    multi-select), is declined at once with a warning in the transcript; no question."""
    multi = {
        "elicit": {
            "message": "Pick some",
            "schema": {
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}
                }
            },
        }
    }
    url = {"elicit": {"message": "Log in", "url": "https://example.invalid/login"}}
    board = Board(db_url, tmp_path, {"turns": [[multi, url], []]})
    board.work()
    step, _session, items = board.read()
    text = messages(items)
    assert text.count("elicit: decline null") == 2
    logs = [i["text"] for i in items if i["kind"] == "log"]
    assert "agent question declined: fields of a type laneway cannot ask: tags" in logs
    assert "agent question declined: laneway asks only forms" in logs
    assert cli_json(board, "question", "list") == []
    assert step == "Done"
