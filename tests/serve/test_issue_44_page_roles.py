"""Issue 44 item 4: the page for a team, in Chromium. A viewer signs in with their token (the
fragment flow), sees who is signed in, and finds Move and Allow disabled, each saying on hover
which role it needs; an operator signs in through the sign-in form and answers the permission
request with Allow, which the board then names as theirs; the task's panel shows who did
what."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import open_host
from tests.serve.conftest import OPENED_MS, OfficeBoard, laneway, start_serve
from tests.serve.page_kit import browser  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def _pending_request(office: OfficeBoard) -> str:
    with open_host(office.db) as host:
        profile = next(iter(office.profiles))
        session = host.sessions.start(office.task_id, profile=profile, external=False)
        asked = host.permissions.request(
            office.task_id,
            session.id,
            run_id=None,
            tool_call={"title": "Edit src/login.py", "kind": "edit"},
            options=[{"option_id": "a", "kind": "allow_once", "name": "Allow"}],
        )
    return asked.id


def _panel(page: Any, office: OfficeBoard) -> Any:
    page.locator(f".card[data-task-id='{office.task_id}']").click()
    request = page.locator(".permissions .permission", has_text="Edit src/login.py")
    request.wait_for(timeout=10_000)
    return request


def test_issue_44_item_4_a_viewer_cannot_move_or_allow_an_operator_can(
    browser: Any,  # noqa: F811 - the fixture
    office: OfficeBoard,
    tmp_path: Path,
) -> None:
    asked = _pending_request(office)
    laneway(office.db, "task", "move", office.task_id, "Backlog")
    viewer = laneway(office.db, "user", "add", "vera", "--role", "viewer")["token"]
    operator = laneway(office.db, "user", "add", "otto", "--role", "operator")["token"]
    served = start_serve(office.db, tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1440, "height": 860})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(f"{served.url}/#token={viewer}")
        page.wait_for_selector(".live[data-state='live']", timeout=OPENED_MS)
        assert page.locator("#who-name").inner_text() == "vera · viewer"
        assert page.locator("#new-task").is_disabled()
        request = _panel(page, office)
        allow = request.locator("button", has_text="Allow")
        assert allow.is_disabled()
        assert "Needs the operator role" in (allow.get_attribute("title") or "")
        move = page.locator("#move-button")
        assert move.is_disabled()
        assert "Needs the operator role" in (move.get_attribute("title") or "")
        card = page.locator(f".card[data-task-id='{office.task_id}']")
        assert card.get_attribute("draggable") == "false"
        # who did what: the CLI's move, in the panel
        history = page.locator(".panel-section[aria-label='Who did what']")
        history.locator(".history-row", has_text="moved it to Backlog").first.wait_for(
            timeout=10_000
        )
        # a forced click (a disabled button takes none) changes nothing: the server refuses too
        assert laneway(office.db, "permission", "list", "--task", office.task_id)[0]["state"] == (
            "pending"
        )

        # the operator signs in through the form: the token never goes in a URL
        page.evaluate("sessionStorage.clear()")
        page.goto(served.url + "/")
        page.locator("#token-input").fill(operator)
        page.locator("#token-form button[type='submit']").click()
        page.wait_for_selector(".live[data-state='live']", timeout=OPENED_MS)
        assert page.locator("#who-name").inner_text() == "otto · operator"
        request = _panel(page, office)
        assert page.locator("#move-button").is_enabled()
        allow = request.locator("button", has_text="Allow")
        assert allow.is_enabled()
        allow.click()
        page.locator(".permissions").wait_for(state="detached", timeout=10_000)
        [answered] = laneway(office.db, "permission", "list", "--task", office.task_id)
        assert (answered["id"], answered["state"], answered["actor"]) == (
            asked,
            "allowed",
            "user:otto",
        )
        page.locator(".history-row", has_text="answered a permission request").filter(
            has_text="user:otto"
        ).first.wait_for(timeout=10_000)
        assert not any(t in url for url in requests for t in (viewer, operator))
    finally:
        served.stop()
    assert viewer not in served.stderr
    assert operator not in served.stderr
