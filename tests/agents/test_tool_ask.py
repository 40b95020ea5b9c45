"""Issue 41 item 6, the tool server's `ask` as the worker's broker answers it (AGENTS.md "The
tool server"), in-process on both databases: bad arguments are refused in one line; while the
call waits the run counts as asking (the idle watch's pause); a person's answer returns it; and
a turn that ends meanwhile (its grant revoked) ends the question `cancelled` and the call as a
refusal naming it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from core.agents.tools.broker import ToolBroker
from tests.agents.conftest import session_with_run
from tests.conftest import eventually, open_host


def test_issue_41_item_6_ask_refuses_bad_arguments(db_url: str, tmp_path: Path) -> None:
    with open_host(db_url) as host:
        task, session, run = session_with_run(host, tmp_path)
        with ToolBroker(host) as broker:
            grant = broker.grant(
                task_id=task, step_id=None, run_id=run, session_id=session, agent_profile_id=None
            )
            for args, error in (
                ({}, "ask: question must be non-empty text"),
                ({"question": "  "}, "ask: question must be non-empty text"),
                ({"question": "?", "choices": "yes"}, "ask: choices must be a list of text"),
                ({"question": "?", "choices": [1, 2]}, "ask: choices must be a list of text"),
                ({"question": "?", "task_id": "another"}, f"this run acts for task {task} only"),
            ):
                assert broker.answer({"token": grant.token, "tool": "ask", "args": args}) == {
                    "error": error
                }
        assert host.questions.list() == []


def test_issue_41_item_6_ask_returns_the_answer_or_is_cancelled_when_its_turn_ends(
    db_url: str, tmp_path: Path
) -> None:
    with open_host(db_url) as host:
        task, session, run = session_with_run(host, tmp_path)
        with ToolBroker(host) as broker:
            grant = broker.grant(
                task_id=task, step_id=None, run_id=run, session_id=session, agent_profile_id=None
            )
            got: list[dict[str, Any]] = []

            def call(question: str) -> threading.Thread:
                thread = threading.Thread(
                    target=lambda: got.append(
                        broker.answer(
                            {
                                "token": grant.token,
                                "tool": "ask",
                                "args": {"question": question, "choices": ["a", "b"]},
                            }
                        )
                    )
                )
                thread.start()
                return thread

            thread = call("first?")
            (first,) = eventually(lambda: host.questions.list(state="pending"), what="asked")
            assert broker.asking(grant.token)
            with open_host(db_url) as other:
                other.questions.answer(first.id[-8:], {"answer": "b"}, by="user:gail")
            thread.join(30)
            assert got.pop() == {
                "ok": {
                    "question_id": first.id,
                    "state": "answered",
                    "answer": "b",
                    "answered_by": "user:gail",
                }
            }
            assert not broker.asking(grant.token)

            thread = call("second?")
            (second,) = eventually(lambda: host.questions.list(state="pending"), what="asked")
            time.sleep(0.3)
            broker.revoke(grant.token)  # the turn ended
            thread.join(30)
            assert got.pop() == {"error": f"ask: question {second.id} was cancelled (turn_ended)"}
            ended = host.questions.get(second.id)
            assert (ended.state, ended.answered_by) == ("cancelled", "turn_ended")
