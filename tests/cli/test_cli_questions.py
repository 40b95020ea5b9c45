"""Issue 41 item 6: CLI.md `question list [--task T] [--state S]` / `question answer ID --field
NAME=VALUE ... | --decline` (text and `--json`, on both databases), the answer naming its
person (`user:<$LANEWAY_USER>`), bad input as one line with exit 1; and HTTP.md `GET
/api/questions?task=T&state=S` / `POST /api/questions/{q}` (`{"answer": {...}}` or
`{"decline": true}`), a bad answer a JSON 400 naming the field, a second one a 409."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from starlette.testclient import TestClient

from core.serve.app import build_app
from core.store import tables as t
from tests.cli.conftest import Laneway
from tests.conftest import open_host
from tests.store.test_store_questions import asked_question

QUESTION_KEYS = {
    "id",
    "task_id",
    "session_id",
    "run_id",
    "message",
    "fields",
    "state",
    "answer",
    "answered_by",
    "created_at",
    "answered_at",
}
TOKEN = "t0ken"


def test_issue_41_item_6_question_list_and_answer_from_the_cli(
    laneway: Laneway, tmp_path: Path
) -> None:
    assert laneway.run("question", "list").stdout.splitlines() == ["no questions"]
    with open_host(laneway.url) as host:
        asked, run_id = asked_question(host, tmp_path)
    (line,) = laneway.run("question", "list", "--state", "pending").stdout.splitlines()
    assert line == (
        f"{asked.id}  pending  task={asked.task_id}  run={run_id}  "
        "fields=colour,count,ratio,sure  Which colour, and how many?"
    )
    (shown,) = laneway.json("question", "list", "--task", asked.task_id)
    assert set(shown) == QUESTION_KEYS
    assert shown["fields"][0] == {
        "name": "colour",
        "type": "string",
        "title": "Colour",
        "required": True,
        "choices": ["red", "blue"],
    }
    assert laneway.fails("question", "answer", asked.id, "--field", "colour=green") == (
        'laneway: answer field \'colour\': "green" is not one of "red", "blue"'
    )
    assert laneway.fails("question", "answer", asked.id, "--field", "colour=red") == (
        "laneway: answer field 'count': required, not given"
    )
    assert laneway.fails("question", "answer", asked.id, "--field", "colour") == (
        "laneway: --field 'colour': expected NAME=VALUE"
    )
    assert laneway.fails("question", "answer", asked.id) == (
        "laneway: question answer: give --field NAME=VALUE (one per field) or --decline"
    )
    assert laneway.fails("question", "answer", "nosuchid", "--decline") == (
        "laneway: no question 'nosuchid'"
    )
    answered = laneway.json(
        "question",
        "answer",
        asked.id[-8:],
        "--field",
        "colour=blue",
        "--field",
        "count=4",
        "--field",
        "sure=false",
        env={"LANEWAY_USER": "alice"},
    )
    assert (answered["state"], answered["answer"], answered["answered_by"]) == (
        "answered",
        {"colour": "blue", "count": 4, "sure": False},
        "user:alice",
    )
    assert laneway.fails("question", "answer", asked.id, "--decline") == (
        f"laneway: question {asked.id} is already answered by user:alice; it cannot be answered"
    )
    assert laneway.json("question", "list", "--state", "answered")[0]["id"] == asked.id
    with open_host(laneway.url) as host, host.store.read() as conn:
        kept = conn.execute(
            sa.select(sa.func.count()).where(t.board_events.c.task_id == asked.task_id)
        ).scalar_one()
    watched = laneway.run(
        "watch", "--since", "0", "--count", str(kept), "--task", asked.task_id
    ).stdout.splitlines()
    short = asked.id[-8:]
    assert [line.split("  ")[-1] for line in watched if " question." in line] == [
        f"question {short} pending",
        f"question {short} answered",
    ]


def test_issue_41_item_6_questions_over_http(db_url: str, tmp_path: Path) -> None:
    def ok(response: Any, status: int = 200) -> Any:
        assert response.status_code == status, response.text
        return response.json()

    with open_host(db_url) as host:
        asked, run_id = asked_question(host, tmp_path)
        declined_q = host.questions.ask(
            asked.task_id, asked.session_id, run_id=run_id, message="skip?", fields=[]
        )
        with TestClient(build_app(host, token=TOKEN)) as c:
            c.headers["Authorization"] = f"Bearer {TOKEN}"
            listed = ok(c.get("/api/questions", params={"task": asked.task_id}))
            assert [q["id"] for q in listed] == [asked.id, declined_q.id]
            assert set(listed[0]) == QUESTION_KEYS
            assert ok(c.get("/api/questions", params={"state": "answered"})) == []
            bad = c.post(f"/api/questions/{asked.id}", json={"answer": {"colour": "red"}})
            assert bad.status_code == 400
            assert bad.json()["error"] == "answer field 'count': required, not given"
            bad = c.post(f"/api/questions/{asked.id}", json={"answer": "red"})
            assert bad.status_code == 400
            assert "field 'answer'" in bad.json()["error"]
            answered = ok(
                c.post(
                    f"/api/questions/{asked.id}",
                    json={"answer": {"colour": "red", "count": 2, "ratio": 0.5}},
                )
            )
            assert (answered["state"], answered["answer"], answered["answered_by"]) == (
                "answered",
                {"colour": "red", "count": 2, "ratio": 0.5},
                "user:admin",  # the board's admin token (serve --token): issue 44's actor
            )
            again = c.post(f"/api/questions/{asked.id}", json={"decline": True})
            assert again.status_code == 409
            assert "is already answered by user:admin" in again.json()["error"]
            declined = ok(c.post(f"/api/questions/{declined_q.id[-8:]}", json={"decline": True}))
            assert (declined["state"], declined["answer"]) == ("declined", None)
            assert [q["state"] for q in ok(c.get("/api/questions"))] == ["answered", "declined"]
