"""Issue 38 item 8 and issue 39 item 8: a comment has a size limit of its own (MAX_COMMENT,
docs/cli.md and docs/http.md), a verdict's comment the same; a person's longer one is refused
in one line, an agent's (a 10 MB verdict comment) is cut to it and says so; and the feedback
block a prompt carries is capped (each text at MAX_ENTRY, the block at MAX_BLOCK, the oldest
comments left out first, saying how many)."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from core.agents.feedback import HEADER, MAX_BLOCK, MAX_ENTRY
from core.agents.session import prompt_for
from core.errors import LanewayError
from core.host import Host
from core.serve.app import build_app
from core.text import MAX_COMMENT
from tests.agents.conftest import enqueue, set_run, stamp
from tests.cli.conftest import Laneway
from tests.tools.board import review_board

TOKEN = "comment-limits-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_issue_38_item_8_a_comment_past_its_limit_is_refused_in_one_line(
    host: Host, db_url: str
) -> None:
    board = review_board(host)
    task = board.task.id
    at_limit = host.comments.add(task, "x" * MAX_COMMENT, author="alice")
    assert len(at_limit.body) == MAX_COMMENT
    with pytest.raises(LanewayError) as raised:
        host.comments.add(task, "x" * (MAX_COMMENT + 1), author="alice")
    assert str(raised.value) == (
        f"comment body: longer than {MAX_COMMENT} characters ({MAX_COMMENT + 1})"
    )
    said = Laneway(db_url).fails("task", "comment", task, "y" * (MAX_COMMENT + 1))
    assert (
        said == f"laneway: comment body: longer than {MAX_COMMENT} characters ({MAX_COMMENT + 1})"
    )
    with TestClient(build_app(host, token=TOKEN), raise_server_exceptions=False) as client:
        answer = client.post(
            f"/api/tasks/{task}/comments", json={"body": "z" * (MAX_COMMENT + 1)}, headers=AUTH
        )
    assert answer.status_code == 400, answer.text
    assert "longer than" in answer.json()["error"]
    assert [len(c.body) for c in host.comments.list(task)] == [MAX_COMMENT]


def _seat(host: Host, task: str, profile: str) -> str:
    wanted = host.profiles.get(profile).id
    (seat,) = [
        s for s in host.participants.list(step="Review", task=task) if s.agent_profile_id == wanted
    ]
    return seat.id


def test_issue_39_item_8_a_10_mb_verdict_comment_is_cut_and_a_persons_refused(
    host: Host,
) -> None:
    board = review_board(host)
    task = board.task.id
    huge = "v" * (10 * 1024 * 1024)
    with pytest.raises(LanewayError) as raised:
        host.decisions.record(task, "Review", _seat(host, task, "r1"), "rejected", comment=huge)
    assert str(raised.value).startswith(f"verdict comment: longer than {MAX_COMMENT} characters")
    result = host.decisions.record_for_agent(
        task, board.step("Review"), host.profiles.get("r1").id, "rejected", comment=huge
    )
    kept = result["decision"].comment
    assert len(kept) <= MAX_COMMENT
    assert kept.startswith("vvvv")
    assert kept.endswith("more characters]")
    (stored,) = host.decisions.for_task(task, "Review", all_rounds=True)
    assert stored.comment == kept


def test_issue_38_item_8_the_feedback_block_is_capped_newest_comments_first(
    host: Host, tmp_path: Path
) -> None:
    """A run after its agent's last turn, with a 10 MB verdict comment (an agent's, cut) and
    forty comments at the limit: the prompt's block stays within MAX_BLOCK, each text within
    MAX_ENTRY, the newest comment is in it and a line says how many older ones were left
    out."""
    board = review_board(host)
    task = board.task.id
    worker = host.profiles.get("worker").id
    host.tasks.move(task, "Work")
    first = enqueue(host, worker, task)
    set_run(host, first, status="finished", claimed_at=stamp(-60), finished_at=stamp(-59))
    host.tasks.move(task, "Review")
    host.decisions.record_for_agent(
        task,
        board.step("Review"),
        host.profiles.get("r1").id,
        "rejected",
        comment="r" * (10 * 1024 * 1024),
    )
    for n in range(40):
        host.comments.add(task, f"{n:02d}" + "c" * (MAX_COMMENT - 2), author="alice")
    second = enqueue(host, worker, task)
    prompt = prompt_for(host, host.runs.find(second))
    block = prompt[prompt.index(HEADER) :]
    assert len(block) <= MAX_BLOCK
    assert "- rejected by reviewer: rrrr" in block
    verdict = next(line for line in block.splitlines() if line.startswith("- rejected"))
    assert len(verdict) < MAX_ENTRY + 100
    assert "- alice: 39ccc" in block  # the newest comment
    assert "- alice: 00ccc" not in block  # the oldest left out, and said so
    kept = block.count("- alice: ")
    assert f"({40 - kept} earlier comments left out: `laneway task comments` has them)" in block
    assert kept >= 1
