"""Issue 41 item 6, the store half of questions to a person, on a real SQLite file and
PostgreSQL: CLI.md's *question* (named by id or a unique suffix), `question answer` decided by a
conditional UPDATE (one of two racing answers wins, the other is a Conflict naming the state),
answers checked against the fields (type, required, choices) in one line naming the field, a
run that ends or dies cancelling its pending questions, HTTP.md's `question.asked` /
`question.answered` events with `task.needs_person` / `task.needs_person_ended` (reason
`question`), on_approval_resolved fired once (`question:<id>`), and the waiting side learning
of an answer from another host at once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import Host, runs
from core.errors import Conflict, LanewayError, NotFound
from core.model import Question
from core.store import tables as t
from tests.agents.conftest import session_with_run
from tests.conftest import open_host

FIELDS: list[dict[str, Any]] = [
    {"name": "colour", "type": "string", "title": "Colour", "choices": ["red", "blue"]},
    {"name": "count", "type": "integer"},
    {"name": "ratio", "type": "number", "required": False},
    {"name": "sure", "type": "boolean", "required": False},
]


def asked_question(
    host: Host, tmp_path: Path, fields: list[dict[str, Any]] = FIELDS
) -> tuple[Question, str]:
    """A pending question of a task's session, for a run: (question, run id)."""
    task, session, run = session_with_run(host, tmp_path, title="q")
    found = host.questions.ask(
        task, session, run_id=run, message="Which colour, and how many?", fields=fields
    )
    return found, run


def board_events(host: Host) -> list[tuple[str, dict[str, Any]]]:
    with host.store.read() as conn:
        found = conn.execute(
            sa.select(t.board_events.c.type, t.board_events.c.data)
            .where(
                sa.or_(
                    t.board_events.c.type.like("question.%"),
                    t.board_events.c.type.like("task.needs_person%"),
                )
            )
            .order_by(t.board_events.c.id)
        ).all()
    return [(kind, json.loads(data)) for kind, data in found]


def test_issue_41_item_6_a_question_is_pending_found_listed_and_announced(
    db_url: str, tmp_path: Path
) -> None:
    """CLI.md's question shape; named by id or a 6+ suffix; `question list --task --state`;
    `question.asked` and `task.needs_person` (reason `question`) in the row's transaction."""
    with open_host(db_url) as host:
        asked, run_id = asked_question(host, tmp_path)
        assert (asked.state, asked.answer, asked.answered_by, asked.run_id) == (
            "pending",
            None,
            None,
            run_id,
        )
        assert [f.name for f in asked.fields] == ["colour", "count", "ratio", "sure"]
        assert asked.fields[0].choices == ("red", "blue")
        assert host.questions.find(asked.id) == asked
        assert host.questions.find(asked.id[-6:]) == asked
        with pytest.raises(NotFound):
            host.questions.find("nosuchquestion")
        assert host.questions.list(task=asked.task_id) == [asked]
        assert host.questions.list(state="pending") == [asked]
        assert host.questions.list(state="answered") == []
        with pytest.raises(LanewayError, match="pending, answered, declined, cancelled"):
            host.questions.list(state="maybe")
        assert board_events(host) == [
            ("question.asked", {"question_id": asked.id, "run_id": run_id, "state": "pending"}),
            (
                "task.needs_person",
                {"reason": "question", "question_id": asked.id, "run_id": run_id},
            ),
        ]


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"count": "3"}, "answer field 'colour': required, not given"),
        ({"colour": "green", "count": "3"}, "answer field 'colour': \"green\" is not one of"),
        ({"colour": "red", "count": "three"}, "answer field 'count': expected an integer"),
        ({"colour": "red", "count": 2.5}, "answer field 'count': expected an integer"),
        ({"colour": "red", "count": 1, "ratio": "x"}, "answer field 'ratio': expected a number"),
        ({"colour": "red", "count": 1, "sure": "perhaps"}, "'sure': expected true or false"),
        ({"colour": 7, "count": 1}, "answer field 'colour': expected text"),
        ({"colour": "red", "count": 1, "size": "L"}, "answer field 'size': the question has no"),
    ],
)
def test_issue_41_item_6_an_answer_is_checked_against_the_fields(
    host: Host, tmp_path: Path, given: dict[str, Any], error: str
) -> None:
    """Type, required and choices: a bad answer is one line naming the field, and the
    question stays pending (nothing written)."""
    asked, _run = asked_question(host, tmp_path)
    with pytest.raises(LanewayError) as caught:
        host.questions.answer(asked.id, given)
    assert error in str(caught.value)
    assert "\n" not in str(caught.value)
    assert host.questions.get(asked.id).state == "pending"


def test_issue_41_item_6_values_are_stored_typed_and_a_second_answer_is_refused(
    host: Host, tmp_path: Path
) -> None:
    """Text values (the CLI's `--field NAME=VALUE`) become the field's type; the answer is
    kept once; a second answer or a decline is a Conflict naming the state and who answered."""
    asked, run_id = asked_question(host, tmp_path)
    answered = host.questions.answer(
        asked.id[-8:], {"colour": "blue", "count": "3", "sure": "yes"}, by="user:alice"
    )
    assert answered.state == "answered"
    assert answered.answer == {"colour": "blue", "count": 3, "sure": True}
    assert answered.answered_by == "user:alice"
    assert answered.answered_at is not None
    for again in (
        lambda: host.questions.answer(asked.id, {"colour": "red", "count": 1}),
        lambda: host.questions.answer(asked.id, decline=True),
    ):
        with pytest.raises(Conflict) as caught:
            again()
        assert str(caught.value) == (
            f"question {asked.id} is already answered by user:alice; it cannot be answered"
        )
    assert board_events(host)[2:] == [
        ("question.answered", {"question_id": asked.id, "run_id": run_id, "state": "answered"}),
        (
            "task.needs_person_ended",
            {"reason": "question", "question_id": asked.id, "run_id": run_id},
        ),
    ]


def test_issue_41_item_6_a_question_form_that_cannot_be_one_is_refused(
    host: Host, tmp_path: Path
) -> None:
    task, session, run = session_with_run(host, tmp_path)
    for fields, error in (
        ([{"name": ""}], "question field 1: 'name' must be non-empty text"),
        ([{"name": "a"}, {"name": "a"}], "question field 'a': named twice"),
        ([{"name": "a", "type": "date"}], "question field 'a': type 'date' is not one of"),
        ([{"name": "a", "type": "integer", "choices": ["x"]}], "'a': expected an integer"),
    ):
        with pytest.raises(LanewayError, match=error):
            host.questions.ask(task, session, run_id=run, message="?", fields=fields)
    assert host.questions.list() == []


def test_issue_41_item_6_two_racing_answers_one_wins(db_url: str, tmp_path: Path) -> None:
    """The answer is a conditional UPDATE: two hosts answering at once, exactly one wins; the
    other is a Conflict naming what the question became."""
    with open_host(db_url) as host:
        asked, _run = asked_question(host, tmp_path, fields=[{"name": "ok", "type": "boolean"}])
    results: list[object] = []
    barrier = threading.Barrier(2)

    def answer(decline: bool) -> None:
        with open_host(db_url) as other:
            barrier.wait()
            try:
                results.append(
                    other.questions.answer(
                        asked.id,
                        None if decline else {"ok": True},
                        decline=decline,
                        by=f"user:p{int(decline)}",
                    )
                )
            except Conflict as exc:
                results.append(exc)

    threads = [threading.Thread(target=answer, args=(flag,)) for flag in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    won = [r for r in results if isinstance(r, Question)]
    lost = [r for r in results if isinstance(r, Conflict)]
    assert (len(won), len(lost)) == (1, 1)
    assert f"is already {won[0].state} by {won[0].answered_by}" in str(lost[0])
    with open_host(db_url) as host:
        answered = [e for e in board_events(host) if e[0] == "question.answered"]
        assert [e[1]["state"] for e in answered] == [won[0].state]


def test_issue_41_item_6_a_run_that_ends_or_dies_cancels_its_pending_question(
    db_url: str, tmp_path: Path
) -> None:
    """A run ending (release) or re-queued from a dead worker ends its pending questions
    `cancelled` with `question.answered` and `task.needs_person_ended`; one answered first
    keeps its answer."""
    with open_host(db_url) as host:
        first, run_id = asked_question(host, tmp_path)
        second = host.questions.ask(
            first.task_id, first.session_id, run_id=run_id, message="again?", fields=[]
        )
        host.questions.answer(second.id, {}, by="user:bob")
        with host.store.transaction() as uow:
            assert runs.cancel_questions(uow, [run_id], by="worker_died") == [first.id]
        gone = host.questions.get(first.id)
        assert (gone.state, gone.answered_by) == ("cancelled", "worker_died")
        assert host.questions.get(second.id).state == "answered"
        ended = [e for e in board_events(host) if e[1].get("question_id") == first.id]
        assert [(kind, data.get("state")) for kind, data in ended][-2:] == [
            ("question.answered", "cancelled"),
            ("task.needs_person_ended", None),
        ]


def test_issue_41_item_6_the_waiting_side_learns_of_an_answer_from_another_host(
    db_url: str, tmp_path: Path
) -> None:
    """`wait` returns once another host (as another process) answers; and returns at once,
    pending, when its turn is over (`stop`)."""
    with open_host(db_url) as host:
        asked, _run = asked_question(host, tmp_path)
        got: list[Question] = []
        waiter = threading.Thread(
            target=lambda: got.append(host.questions.wait(asked.id, stop=lambda: False))
        )
        waiter.start()
        time.sleep(0.3)
        with open_host(db_url) as other:
            other.questions.answer(asked.id, {"colour": "red", "count": 2}, by="user:carol")
        waiter.join(30)
        assert [(q.state, q.answer) for q in got] == [("answered", {"colour": "red", "count": 2})]
        other_q = host.questions.ask(
            asked.task_id, asked.session_id, run_id=None, message="?", fields=[]
        )
        assert host.questions.wait(other_q.id, stop=lambda: True).state == "pending"


def test_issue_41_item_6_an_answer_fires_on_approval_resolved_once(
    db_url: str, tmp_path: Path
) -> None:
    """The answer delivers on_approval_resolved with operation id `question:<id>`; a second
    delivery of the same answer evaluates nothing."""
    with open_host(db_url) as host:
        asked, _run = asked_question(host, tmp_path, fields=[])
        answered = host.questions.answer(asked.id, {}, by="user:dan")
        ops = t.applied_operations
        with host.store.read() as conn:
            states = conn.execute(
                sa.select(ops.c.state).where(ops.c.operation_id == f"question:{asked.id}")
            ).all()
        assert len(states) == 1
        again = host.questions.fire(answered)
        assert again.idempotent
