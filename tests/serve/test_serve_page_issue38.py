"""Issue 38 items 11 to 16, the board page's part, in Debian's chromium against a real
`laneway serve` on the `simple` (Kanban) board with a runner at In Progress and no worker:
each card's "who is on it" line says what is true (queued for a worker and how to start one,
cancelled, waiting for a person at Review); a task's state never reads like a step; the panel
has Start (and New task defaults to the start step); blockers, parents, subtasks and the
over-budget badge show, and a blocked task's Start is off with the reason; paths in a
permission request and a tool call read relative to the task's worktree; on a phone no toast
covers the panel. `LANEWAY_SCREENSHOT_DIR=DIR` keeps the desktop and phone shots there."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from core.runs import RunRequest
from core.services import worktrees
from core.store import tables as t
from tests.agents.test_worktrees import make_repo
from tests.conftest import eventually, open_host
from tests.serve.conftest import Served, laneway, start_serve
from tests.serve.page_kit import browser, open_page
from tests.serve.test_serve_page import _card, _lane

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the module's browser fixture, used by name

SHOTS = os.environ.get("LANEWAY_SCREENSHOT_DIR", "")
WT = "laneway/worktrees"


@attrs.frozen
class Board:
    served: Served
    db: str
    tasks: dict[str, str]
    """title -> task id"""
    steps: dict[str, str]


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    tmp = tmp_path_factory.mktemp("issue38")
    patch = pytest.MonkeyPatch()
    # a long worktree path, as a real data directory's is
    patch.setenv("LANEWAY_WORKTREES", str(tmp / "home" / "someone" / ".local" / "share" / WT))
    db = f"sqlite:///{tmp / 'board.db'}"
    laneway(db, "init")
    tasks: dict[str, str] = {}
    with open_host(db) as host:
        wf = host.workflows.create_from_template("simple")
        steps = {s.name: s.id for s in wf.steps}
        bot = host.profiles.add("bot", command=["true"])
        host.participants.add(workflow=wf.id, step="In Progress", role="runner", profile="bot")

        def task(title: str, **kw: Any) -> str:
            tasks[title] = host.tasks.create(workflow=wf.id, title=title, **kw).id
            return tasks[title]

        task("Not started yet")
        task("Start me from the panel")
        host.tasks.start(task("Queued with no worker"))
        host.tasks.start(cancelled := task("Cancelled by hand"))
        host.runs.cancel_task(cancelled)
        host.tasks.move(task("Look at the review"), "Review")
        host.tasks.set_state(task("Agent failed here"), "REVIEW")
        gate = task("Land the schema first")
        host.blockers.block(task("Waits for the schema"), gate)
        epic = task("Epic: new login")
        task("Login form", parent=epic)
        done = task("Login tests", parent=epic)
        host.tasks.move(done, "Done")
        host.tasks.start(costly := task("Costly research"))
        (run,) = host.runs.list(task=costly)
        host.runs.record_usage(run.id, {"cost_usd": 5.0})
        host.budgets.set(scope="task", ref=costly, limit_usd=1.0)
        # a task an agent works in its real worktree: a tool call and a permission request
        # naming absolute paths inside it
        repo = make_repo(tmp / "repo")
        agent = task("Edit in the worktree", repository=str(repo))
        root = str(worktrees.workspace_for(host, agent))
        # issue 43 item 1: a task whose worktree is on another machine, queued there
        patch.setenv("LANEWAY_HOST", "alpha")
        pinned = task("Made on alpha", repository=str(repo))
        worktrees.workspace_for(host, pinned)
        patch.delenv("LANEWAY_HOST")
        host.tasks.start(pinned)
        session = host.sessions.start(agent, profile="bot", external=False)
        turn = host.runs.enqueue(
            RunRequest(
                agent_profile_id=bot.id,
                task_id=agent,
                workflow_step_id=steps["In Progress"],
                reason="task_assigned",
            )
        )
        title = f"Read {root}/src/very/deeply/nested/package/module/with_a_long_name.py"
        host.sessions.append_items(
            session.id,
            [("tool_call", title, {"toolCallId": "c1", "title": title, "kind": "read"})],
            run_id=turn.run_id,
        )
        with host.store.transaction() as uow:
            uow.conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id == turn.run_id)
                .values(status="finished", session_id=session.id)
            )
        host.permissions.request(
            agent,
            session.id,
            run_id=None,
            tool_call={"title": f"Edit {root}/src/login.py", "kind": "edit"},
            options=[{"optionId": "a", "kind": "allow_once", "name": "Allow"}],
        )
    served = start_serve(db, tmp)
    try:
        yield Board(served=served, db=db, tasks=tasks, steps=steps)
    finally:
        served.stop()
        patch.undo()


def poll(what: str, found: Callable[[], Any], timeout: float = 15.0) -> Any:
    return eventually(found, timeout=timeout, what=what, every=0.1)


def page_of(browser: Any, board: Board, **context: Any) -> Any:
    page = open_page(browser, board.served, **context)
    page.locator(".card").first.wait_for(timeout=10_000)
    return page


def waits(page: Any, title: str) -> str:
    return str(_card(page, title).locator(".waits").inner_text())


def open_panel(page: Any, title: str) -> None:
    _card(page, title).locator(".card-title").click()
    page.locator("#detail-title", has_text=title).wait_for(timeout=10_000)
    page.locator("#detail-body .actions").wait_for(timeout=10_000)


def test_issue_43_item_1_the_card_says_which_host_its_runs_wait_for(
    browser: Any, board: Board
) -> None:
    """A queued task whose worktree lives on alpha (no remote): its card says a worker on
    alpha is what it waits for, in its line and a badge."""
    page = page_of(browser, board)
    said = waits(page, "Made on alpha")
    assert "waits for a worker on alpha" in said, said
    badge = _card(page, "Made on alpha").locator(".badge", has_text="waits for alpha")
    assert badge.count() == 1


def test_issue_38_item_11_the_card_says_who_is_on_it_truly(browser: Any, board: Board) -> None:
    page = page_of(browser, board)
    queued = waits(page, "Queued with no worker")
    assert "waits for a worker" in queued, queued
    assert "laneway worker" in queued, queued
    cancelled = waits(page, "Cancelled by hand")
    assert cancelled.startswith("Cancelled"), cancelled
    review = waits(page, "Look at the review")
    assert "review" in review.lower(), review
    assert "Nobody" not in review, review
    assert "Start" in waits(page, "Not started yet")
    for said in (queued, cancelled, review):
        assert "move it to a step with an agent" not in said
    assert page.errors == []
    page.context.close()


def test_issue_38_item_12_a_state_never_reads_like_a_step(browser: Any, board: Board) -> None:
    page = page_of(browser, board)
    step_names = {name.lower() for name in board.steps}
    card = _card(page, "Agent failed here")
    assert _lane(page, "In Progress").locator(".card[data-title='Agent failed here']").count()
    pill = card.locator(".pill.state")
    text = pill.inner_text().strip().lower()
    assert text.startswith("state:"), text
    assert "review" not in text, text
    assert pill.get_attribute("title") == "Task state REVIEW (not a step)"
    for element in page.locator(".card .pill.state").all():
        words = element.inner_text().strip().lower().removeprefix("state:").strip()
        assert words not in step_names, words
    options = page.locator("#filter-state option").all_inner_texts()
    assert not {o.lower() for o in options} & step_names, options
    assert page.errors == []
    page.context.close()


def test_issue_38_item_13_start_in_the_panel_and_new_task_defaults_to_the_start_step(
    browser: Any, board: Board
) -> None:
    page = page_of(browser, board)
    page.locator("#new-task").click()
    chosen = page.locator("#create-step").input_value()
    assert chosen == board.steps["In Progress"]
    assert "starts no agent" in page.locator("#create-note").inner_text()
    page.locator("#create-cancel").click()

    open_panel(page, "Start me from the panel")
    start = page.locator("#start-task")
    assert start.inner_text() == "Start bot"
    start.click()
    poll(
        "the card queued for a worker",
        lambda: "waits for a worker" in waits(page, "Start me from the panel"),
    )
    with board.served.client() as c:
        found = c.get(f"/api/runs?task={board.tasks['Start me from the panel']}").json()
    assert [(r["reason"], r["status"]) for r in found] == [("task_assigned", "queued")]
    poll("no Start while its run is queued", lambda: page.locator("#start-task").count() == 0)
    assert page.errors == []
    page.context.close()


def test_issue_38_item_15_blockers_parent_subtasks_and_over_budget_show(
    browser: Any, board: Board
) -> None:
    page = page_of(browser, board)
    blocked = _card(page, "Waits for the schema")
    assert "blocked by 1" in blocked.locator(".badges").inner_text()
    assert "Blocked by “Land the schema first”" in waits(page, "Waits for the schema")
    assert "subtasks 1/2" in _card(page, "Epic: new login").locator(".badges").inner_text()
    assert "subtask of Epic: new login" in _card(page, "Login form").locator(".badges").inner_text()
    assert "over budget" in _card(page, "Costly research").locator(".badges").inner_text()

    open_panel(page, "Waits for the schema")
    relations = page.locator(".relations")
    assert "Blocked by “Land the schema first”" in relations.inner_text()
    assert page.locator("#start-task").is_disabled()
    assert "Blocked by" in page.locator("#start-why").inner_text()

    open_panel(page, "Epic: new login")
    listed = page.locator(".relations").inner_text()
    assert "Subtask “Login form”" in listed
    assert "Subtask “Login tests”" in listed
    page.locator(".relations .relation-link", has_text="Login form").click()
    page.locator("#detail-title", has_text="Login form").wait_for(timeout=10_000)
    assert "Subtask of “Epic: new login”" in page.locator(".relations").inner_text()
    assert page.errors == []
    page.context.close()


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_issue_38_item_16_paths_read_relative_and_no_toast_covers_the_panel(
    browser: Any, board: Board, width: int, height: int
) -> None:
    page = page_of(browser, board, viewport={"width": width, "height": height})
    open_panel(page, "Edit in the worktree")
    asked = page.locator(".permission p").inner_text()
    assert "Edit src/login.py" in asked, asked
    assert WT not in asked, asked
    tool = page.locator("li.tool_call .tool-title")
    tool.wait_for(timeout=10_000)
    said = tool.inner_text()
    assert said.startswith("Read src/very/deeply"), said
    assert WT not in said, said
    # nothing overflows the panel sideways
    panel = page.locator("#detail").bounding_box()
    for box in (tool.bounding_box(), page.locator(".permission").bounding_box()):
        assert box["x"] + box["width"] <= panel["x"] + panel["width"] + 1, (box, panel)

    # a toast (a comment added) sits beside or below the panel, never over it
    page.locator("#comment-text").fill("looks right")
    page.locator(".comment-form button[type='submit']").click()
    shown = page.locator(".toast", has_text="Comment added")
    shown.wait_for(timeout=10_000)
    toast_box = shown.bounding_box()
    poll(
        "the panel ends above the toast",
        lambda: not _overlap(page.locator("#detail").bounding_box(), shown.bounding_box()),
        timeout=5.0,
    )
    assert toast_box is not None
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / f"issue38-{width}.png"))
    assert page.errors == []
    page.context.close()


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )
