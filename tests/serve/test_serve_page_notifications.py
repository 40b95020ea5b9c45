"""Issue 42 item 3 in Debian's chromium against a real `laneway serve`: while the board page is
open it raises a browser notification when a task starts waiting for a person (a permission
request written by another process; a block by `laneway task block`, another process too),
naming the task and what it waits for; a click on it opens the task's panel; the tab's title
counts the tasks that wait, and drops as a wait ends. The page asks for the permission once
(never again after a reload). Notifications are captured by wrapping `window.Notification` in
an init script; the context grants the `notifications` permission."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.conftest import eventually, open_host
from tests.serve.conftest import OPENED_MS, Served, laneway, start_serve
from tests.serve.page_kit import browser

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the module's browser fixture, used by name

WRAP = """
(() => {
  const Real = window.Notification;
  window.__notes = [];
  window.__asked = 0;
  class Wrapped extends Real {
    constructor(title, options) {
      super(title, options);
      window.__notes.push({ title, body: (options || {}).body, note: this });
    }
  }
  Object.defineProperty(Wrapped, "permission", { get: () => Real.permission });
  Wrapped.requestPermission = (...args) => {
    window.__asked += 1;
    return Real.requestPermission(...args);
  };
  window.Notification = Wrapped;
})();
"""

ASK = textwrap.dedent(
    """
    import sys
    from core import Host
    from core.plugin.selection import PluginSelection
    with Host.open(sys.argv[1], plugins=PluginSelection(allow=frozenset({"kanban"}))) as host:
        host.permissions.request(
            sys.argv[2], sys.argv[3], run_id=None,
            tool_call={"title": "Edit src/login.py", "kind": "edit"},
            options=[{"option_id": "yes", "name": "Allow", "kind": "allow_once"}],
        )
    """
)


@attrs.frozen
class Board:
    served: Served
    db: str
    task: str
    session: str
    gate: str


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Board]:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    laneway(db, "init")
    with open_host(db) as host:
        wf = host.workflows.create_from_template("simple")
        host.profiles.add("bot", command=["true"])
        task = host.tasks.create(workflow=wf.id, title="Fix the login").id
        gate = host.tasks.create(workflow=wf.id, title="Land the schema").id
        session = host.sessions.start(task, profile="bot", external=False).id
    served = start_serve(db, tmp_path)
    try:
        yield Board(served=served, db=db, task=task, session=session, gate=gate)
    finally:
        served.stop()


def _open(browser: Any, served: Served, **context: Any) -> Any:
    ctx = browser.new_context(viewport={"width": 1440, "height": 900}, **context)
    ctx.add_init_script(WRAP)
    page = ctx.new_page()
    page.goto(f"{served.url}/#token={served.token}")
    page.wait_for_selector(".live[data-state='live']", timeout=OPENED_MS)
    return page


def _notes(page: Any) -> list[dict[str, str]]:
    found: list[dict[str, str]] = page.evaluate(
        "window.__notes.map((n) => ({ title: n.title, body: n.body }))"
    )
    return found


def test_issue_42_item_3_a_notification_when_a_task_starts_waiting_for_a_person(
    browser: Any, board: Board
) -> None:
    page = _open(browser, board.served, permissions=["notifications"])
    assert page.evaluate("Notification.permission") == "granted"
    assert page.title() == "laneway board"

    # a permission request, from another process
    subprocess.run(
        [sys.executable, "-c", ASK, board.db, board.task, board.session], check=True, timeout=60
    )
    eventually(lambda: _notes(page), timeout=15, what="a notification")
    assert _notes(page) == [
        {"title": "“Fix the login” needs you", "body": "its agent asks for permission"}
    ]
    eventually(lambda: page.title() == "(1) laneway board", timeout=10, what="the tab's count")

    # a click on it opens the task's panel
    page.evaluate("window.__notes[0].note.onclick()")
    page.wait_for_selector("#detail:not([hidden])", timeout=10_000)
    eventually(
        lambda: page.locator("#detail-title").inner_text() == "Fix the login",
        timeout=10,
        what="the task's panel",
    )

    # a block, by `laneway task block` (another process): a second task waits
    laneway(board.db, "task", "block", board.gate, "--by", board.task)
    eventually(lambda: len(_notes(page)) == 2, timeout=15, what="a second notification")
    assert _notes(page)[1] == {
        "title": "“Land the schema” needs you",
        "body": "an unfinished task blocks it",
    }
    eventually(lambda: page.title() == "(2) laneway board", timeout=10, what="two wait")

    # the permission answered: one task waits
    [pending] = laneway(board.db, "permission", "list")
    laneway(board.db, "permission", "allow", pending["id"])
    eventually(lambda: page.title() == "(1) laneway board", timeout=10, what="one waits")
    page.context.close()


def test_issue_42_item_3_the_page_asks_for_the_permission_once(browser: Any, board: Board) -> None:
    page = _open(browser, board.served)
    if page.evaluate("Notification.permission") != "default":
        pytest.fail("a fresh context should not have answered the notification permission")
    eventually(lambda: page.evaluate("window.__asked") == 1, timeout=10, what="asked once")
    page.reload()
    page.wait_for_selector(".live[data-state='live']", timeout=OPENED_MS)
    assert page.evaluate("window.__asked") == 0  # remembered: not asked again
    page.context.close()


def test_issue_42_item_3_a_wait_begun_before_the_page_opened_counts_in_the_title(
    browser: Any, board: Board
) -> None:
    laneway(board.db, "task", "block", board.gate, "--by", board.task)
    page = _open(browser, board.served, permissions=["notifications"])
    eventually(lambda: page.title() == "(1) laneway board", timeout=10, what="the tab's count")
    assert _notes(page) == []  # it began before: nothing new to raise
    page.context.close()
