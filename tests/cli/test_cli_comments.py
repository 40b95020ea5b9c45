"""CLI.md `task comment T TEXT [--author A]` / `task comments T`: comment
`{"id", "task_id", "author", "body", "created_at"}` / `[comment]`; a comment fires on_comment
at the task's step (operation id `task_comment:<comment id>`) and goes with its task."""

from __future__ import annotations

import sqlalchemy as sa

from core.store import tables as t
from tests.cli.conftest import Laneway
from tests.conftest import open_host

COMMENT_KEYS = {"id", "task_id", "author", "body", "created_at", "file", "line", "actor"}
"""CLI.md: a comment, with `file` and `line` since phase 4 (null for a comment on the task)."""


def _task_at_work(laneway: Laneway) -> str:
    """An Office Default task at Work, whose on_comment queues a run for Work's runner."""
    wf = laneway.json("workflow", "create", "--template", "office-default")
    laneway.json("profile", "add", "worker", "--command", "agent")
    laneway.json(
        "participant", "add", "--step", "Work", "--role", "runner", "--profile", "worker",
        "--workflow", wf["id"],
    )  # fmt: skip
    task = laneway.json("task", "create", "--workflow", wf["id"], "--title", "t")
    laneway.json("task", "move", task["id"], "Work")
    return str(task["id"])


def test_task_comment_and_comments_shapes(laneway: Laneway) -> None:
    task = _task_at_work(laneway)
    first = laneway.json("task", "comment", task, "Please add a test.")
    assert set(first) == COMMENT_KEYS
    assert (first["task_id"], first["author"], first["body"]) == (
        task,
        "user",
        "Please add a test.",
    )
    second = laneway.json("task", "comment", task, "Done.", "--author", "alice")
    assert second["author"] == "alice"
    assert laneway.json("task", "comments", task) == [first, second]
    text = laneway.run("task", "comments", task)
    assert text.exit_code == 0
    assert text.stdout.splitlines() == [
        f"{first['created_at']}  user: Please add a test.",
        f"{second['created_at']}  alice: Done.",
    ]


def test_task_comment_fires_on_comment_once_with_its_operation_id(laneway: Laneway) -> None:
    """Work's on_comment (queue_run, reason task_comment) runs once per comment; the
    operation id task_comment:<id> is applied in the ledger, and the event is recorded."""
    task = _task_at_work(laneway)
    before = laneway.json("runs", "list", "--task", task)
    made = laneway.json("task", "comment", task, "go on")
    after = laneway.json("runs", "list", "--task", task)
    new = [r for r in after if r["id"] not in {b["id"] for b in before}]
    assert [r["reason"] for r in new] == ["task_comment"]
    with open_host(laneway.url) as host:
        with host.store.read() as conn:
            state = conn.execute(
                sa.select(t.applied_operations.c.state).where(
                    t.applied_operations.c.operation_id == f"task_comment:{made['id']}"
                )
            ).scalar_one()
            added = conn.execute(
                sa.select(t.board_events.c.data).where(t.board_events.c.type == "comment.added")
            ).scalar_one()
        assert state == "applied"
        assert made["id"] in added
        assert host.comments.fire(made["id"]).idempotent
    assert laneway.json("runs", "list", "--task", task) == after


def test_task_comment_bad_input_is_one_line(laneway: Laneway) -> None:
    task = _task_at_work(laneway)
    assert laneway.fails("task", "comment", task, "   ") == (
        "laneway: comment body: must not be empty"
    )
    assert "nope" in laneway.fails("task", "comment", "nope", "hello")
    assert "nope" in laneway.fails("task", "comments", "nope")


def test_comments_go_with_their_task(laneway: Laneway) -> None:
    task = _task_at_work(laneway)
    laneway.json("task", "comment", task, "soon gone")
    laneway.json("task", "delete", task)
    with open_host(laneway.url) as host, host.store.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(t.comments)).scalar() == 0
