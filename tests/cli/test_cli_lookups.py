"""Issue 22 item 6, lookups as CLI.md says: "A task, run, session or permission request may be
named by its id or by a unique suffix of at least 6 characters of it (the board page shows the
last 8); a task also by its exact title when one task has it", and the row
`task list [--workflow W] [--step S] [--state X] [--search TEXT]` ("filters combine"), with
HTTP.md's `GET /api/tasks?...` for the same filters."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from core.runs import RunRequest
from core.store import tables as t
from tests.cli.conftest import Laneway
from tests.conftest import open_host


def _board(lw: Laneway) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    wf = lw.json("workflow", "create", "--template", "simple", "--name", "Board")
    fix = lw.json(
        "task", "create", "--workflow", "Board", "--title", "Fix the login",
        "--description", "The OAuth callback FAILS on Safari",
    )  # fmt: skip
    docs = lw.json("task", "create", "--workflow", "Board", "--title", "Write the docs")
    return wf, fix, docs


def _twin(lw: Laneway, task: dict[str, Any], new_id: str, title: str) -> None:
    """A copy of `task`'s row under an id of the test's choosing (ids are random: two that
    share a suffix are made, not waited for)."""
    with open_host(lw.url) as host, host.store.transaction() as uow:
        row = dict(
            uow.conn.execute(sa.select(t.tasks).where(t.tasks.c.id == task["id"])).mappings().one()
        )
        uow.conn.execute(sa.insert(t.tasks).values({**row, "id": new_id, "title": title}))


def test_a_task_is_named_by_its_id_a_unique_suffix_or_its_exact_title(laneway: Laneway) -> None:
    """CLI.md naming rule: id, the last 8 (or 6) characters, or the exact title of one task."""
    _wf, fix, _docs = _board(laneway)
    for ref in (fix["id"], fix["id"][-8:], fix["id"][-6:], "Fix the login"):
        assert laneway.json("task", "show", ref)["id"] == fix["id"], ref
    # every command that takes T resolves the same way
    laneway.json("task", "comment", fix["id"][-8:], "looks good")
    comments = laneway.json("task", "comments", "Fix the login")
    assert [c["body"] for c in comments] == ["looks good"]


def test_an_ambiguous_or_too_short_task_reference_is_one_line_saying_why(
    laneway: Laneway,
) -> None:
    """Ambiguous suffix or title: one line saying how many match; under 6 characters (and no
    such title): one line naming the rule."""
    _wf, fix, docs = _board(laneway)
    _twin(laneway, fix, "twin-one-abcdef9", "Twin")
    _twin(laneway, docs, "twin-two-abcdef9", "Twin")
    line = laneway.fails("task", "show", "abcdef9")
    assert "ambiguous" in line
    assert "2 task ids end in it" in line
    assert laneway.json("task", "show", "one-abcdef9")["id"] == "twin-one-abcdef9"
    line = laneway.fails("task", "show", "Twin")
    assert "ambiguous" in line
    assert "2 tasks have that title" in line
    line = laneway.fails("task", "show", fix["id"][-5:])
    assert "6+ characters" in line
    assert "no task" in line
    assert "no task" in laneway.fails("task", "show", "Nothing like it")


def test_runs_and_sessions_are_named_by_a_suffix(laneway: Laneway) -> None:
    """CLI.md naming rule for runs and sessions: `session list`, `session send`, `runs show`
    take the last 8 characters."""
    _wf, fix, _docs = _board(laneway)
    laneway.json("profile", "add", "worker", "--command", "true")
    session = laneway.json("session", "start", fix["id"][-8:], "--profile", "worker")
    sent = laneway.json("session", "send", session["id"][-8:], "hello")
    assert sent["id"] == session["id"]
    (listed,) = laneway.json("session", "list", "--task", "Fix the login")
    assert listed["id"] == session["id"]
    with open_host(laneway.url) as host:
        run_id = host.runs.enqueue(
            RunRequest(
                agent_profile_id=host.profiles.get("worker").id,
                task_id=fix["id"],
                workflow_step_id=fix["workflow_step_id"],
                reason="test",
            )
        ).run_id
    (run,) = laneway.json("runs", "list", "--task", fix["id"][-8:])
    assert run["id"] == run_id
    assert laneway.json("runs", "show", run_id[-8:])["run"]["id"] == run_id


def test_task_list_filters_by_step_state_and_search_and_they_combine(laneway: Laneway) -> None:
    """`task list [--workflow W] [--step S] [--state X] [--search TEXT]`: search is in the
    title and the description, in any case; the filters combine; a bad state is one line."""
    wf, fix, docs = _board(laneway)

    def titles(*args: str) -> list[str]:
        return [found["title"] for found in laneway.json("task", "list", *args)]

    assert titles("--search", "oauth") == ["Fix the login"]  # the description, any case
    assert titles("--search", "THE") == ["Fix the login", "Write the docs"]
    start = next(s for s in wf["steps"] if s["id"] == fix["workflow_step_id"])
    other = next(s for s in wf["steps"] if s["id"] != start["id"])
    laneway.json("task", "move", docs["id"], other["name"])
    assert titles("--workflow", "Board", "--step", other["name"]) == ["Write the docs"]
    assert titles("--step", start["id"]) == ["Fix the login"]
    assert titles("--step", other["name"].upper()) == ["Write the docs"]  # any workflow's
    assert "no step 'Nowhere'" in laneway.fails("task", "list", "--step", "Nowhere")
    assert titles("--step", start["id"], "--search", "docs") == []
    state = laneway.json("task", "show", fix["id"])["state"]
    assert "Fix the login" in titles("--state", state.lower(), "--search", "login")
    assert titles("--state", state, "--search", "nothing such") == []
    line = laneway.fails("task", "list", "--state", "SLEEPING")
    assert "task state 'SLEEPING'" in line
