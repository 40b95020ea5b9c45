"""The board page in a real browser: Debian's chromium, headless, driven by Playwright for
Python (`executable_path`; no browser is ever downloaded). Issue 13: open the page with the
token, see the lanes and cards of an Office board, drag a card to Review and see the entry and
its markers in the detail panel, record a verdict with a button, and see a change made by a
separate CLI process appear without a reload."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve.board_data import populate
from tests.serve.conftest import OfficeBoard, Served, laneway, start_serve, wait_live

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("LANEWAY_CHROMIUM") or shutil.which("chromium") or ""
LIVE_S = 1.0
"""HTTP.md: live updates reach the page within a second of the change."""


@pytest.fixture
def browser() -> Iterator[Any]:
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium (.ci/run installs it)")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _open(browser: Any, served: Served) -> Any:
    page = browser.new_page(viewport={"width": 1440, "height": 860})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on(
        "response",
        lambda r: (
            errors.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None
        ),
    )
    page.goto(f"{served.url}/#token={served.token}")
    wait_live(page, errors)
    page.errors = errors
    return page


def _lane(page: Any, name: str) -> Any:
    return page.locator(f".lane[data-step-name='{name}']")


def _card(page: Any, title: str) -> Any:
    return page.locator(f".card[data-title='{title}']")


def test_page_lanes_cards_drag_to_review_detail_markers_and_verdict(
    browser: Any, office: OfficeBoard, tmp_path: Path
) -> None:
    """Issue 13 page test (HTTP.md The board page): lanes by step name with WIP counts,
    cards with badges, a drag to Review is a manual move whose entry and markers show in the
    detail panel, Approve records the verdict, a message goes to a running agent's session;
    one screenshot is kept."""
    populate(office)
    served = start_serve(office.db, tmp_path)
    try:
        page = _open(browser, served)
        assert page.url.endswith("/")  # the token left the address bar
        lanes = page.locator(".lane h2").all_inner_texts()
        assert [n.casefold() for n in lanes] == ["backlog", "work", "review", "approval", "done"]
        assert _card(page, "Fix the flaky login test").locator(".badge.running").count() == 1
        assert _card(page, "Move CI to the new runners").locator(".badge.dead").count() == 1
        assert _lane(page, "Work").locator(".wip").inner_text() == "2"

        # drag a card from Work to Review: the manual move of `task move`
        card = _card(page, "Move CI to the new runners")
        page.drag_and_drop(
            ".card[data-title='Move CI to the new runners']", ".lane[data-step-name='Review']"
        )
        _lane(page, "Review").locator(".card[data-title='Move CI to the new runners']").wait_for(
            timeout=5_000
        )
        moved_id = card.get_attribute("data-task-id")
        shown = laneway(office.db, "task", "show", moved_id)
        assert shown["workflow_step_id"] == office.steps["Review"]
        entries = laneway(office.db, "entries", "list", "--task", moved_id)
        assert [e["entry_path"] for e in entries] == ["E2"]

        # the detail panel: the entry with its markers, the seats waiting
        _lane(page, "Review").locator(".card[data-title='Move CI to the new runners']").click()
        entry = page.locator(".entry").first
        entry.wait_for(timeout=5_000)
        assert "Review" in entry.locator(".entry-head").inner_text()
        assert "E2" in entry.locator(".entry-head").inner_text()
        kinds = entry.locator("table.markers tbody tr td:nth-child(2)").all_inner_texts()
        assert kinds == [m["kind"] for m in entries[0]["markers"]]
        states = entry.locator("table.markers tbody tr td:nth-child(3)").all_inner_texts()
        assert states == [m["state"].replace("_", " ") for m in entries[0]["markers"]]
        assert (
            page.locator(".panel-section h3", has_text="Runs").locator(".count").inner_text() == "2"
        )

        # a verdict by button
        page.locator(".seat").first.locator("button.approve").click()
        page.locator(".toast.ok", has_text="approved").wait_for(timeout=5_000)
        decisions = page.locator(".panel-section", has_text="Decisions")
        decisions.locator(".pill.verdict-approved").first.wait_for(timeout=5_000)
        # The card's badge follows with the board's next read: the verdict's own read is dropped
        # when the stream's refresh (for the same commit) starts after it, so it may land later
        # than the panel's pill.
        badge = _card(page, "Move CI to the new runners").locator(".badge.decisions")
        badge.filter(has_text="1/2").wait_for(timeout=5_000)
        assert badge.inner_text().strip().endswith("1/2")

        screenshot = tmp_path / "board.png"
        page.screenshot(path=str(screenshot))
        assert screenshot.stat().st_size > 10_000
        if os.environ.get("LANEWAY_SCREENSHOT_DIR"):
            shutil.copy(screenshot, Path(os.environ["LANEWAY_SCREENSHOT_DIR"]) / "board.png")

        # a message to the running agent's session, from the panel
        _card(page, "Fix the flaky login test").click()
        page.locator("form.message textarea").fill("Please also check the retry logic")
        page.locator("form.message button[type='submit']").click()
        page.locator(".toast.ok", has_text="Message sent").wait_for(timeout=5_000)
        running_id = _card(page, "Fix the flaky login test").get_attribute("data-task-id")
        (session,) = laneway(office.db, "session", "list", "--task", running_id)
        assert session["metadata"]["queued_messages"] == ["Please also check the retry logic"]
        assert page.errors == []
    finally:
        assert served.stop() == 0


def _shows_a_cli_change_live(browser: Any, served: Served, office: OfficeBoard) -> None:
    page = _open(browser, served)
    page.wait_for_selector(f".card[data-task-id='{office.task_id}']")
    laneway(office.db, "task", "move", office.task_id, "Approval")
    # Within a second of the CLI's commit (the wait also covers the browser's own work).
    _lane(page, "Approval").locator(f".card[data-task-id='{office.task_id}']").wait_for(
        timeout=LIVE_S * 1000 + 1500
    )
    made = laneway(
        office.db, "task", "create", "--workflow", office.workflow_id, "--title", "From the CLI"
    )
    _card(page, "From the CLI").wait_for(timeout=LIVE_S * 1000 + 1500)
    assert made["id"] == _card(page, "From the CLI").get_attribute("data-task-id")
    assert page.errors == []


def test_page_shows_a_separate_cli_processes_change_without_reload(
    browser: Any, office: OfficeBoard, tmp_path: Path
) -> None:
    """Issue 13 page test: a change made by a separate CLI process appears without a reload,
    on a `--read-only` serve (which opens the database as a reader)."""
    served = start_serve(office.db, tmp_path, "--read-only")
    try:
        _shows_a_cli_change_live(browser, served, office)
    finally:
        assert served.stop() == 0


def test_page_of_a_writing_serve_shows_a_concurrent_cli_change(
    browser: Any, office: OfficeBoard, tmp_path: Path
) -> None:
    """Issue 13 page test: the same with a writing `serve` beside the CLI process."""
    served = start_serve(office.db, tmp_path)
    try:
        _shows_a_cli_change_live(browser, served, office)
    finally:
        assert served.stop() == 0


WIP_BOARD = """
version: 1
type: kandev_workflow
workflows:
  - name: Narrow
    steps:
      - {name: Inbox, position: 0, is_start_step: true}
      - {name: Doing, position: 1, wip_limit: 1}
      - {name: Done, position: 2}
"""


def test_page_shows_a_full_steps_wip_and_its_queued_tasks_apart(
    browser: Any, office: OfficeBoard, tmp_path: Path
) -> None:
    """HTTP.md The board page: a lane shows its WIP count and limit, and its queued tasks
    apart; the workflow picker switches boards."""
    served = start_serve(office.db, tmp_path)
    try:
        with served.client() as c:
            assert c.post("/api/workflows/import", content=WIP_BOARD).status_code == 201
            made = [
                c.post("/api/tasks", json={"workflow": "Narrow", "title": title}).json()
                for title in ("First in", "Second in line")
            ]
            for task in made:
                assert (
                    c.post(f"/api/tasks/{task['id']}/move", json={"step": "Doing"}).status_code
                    == 200
                )
        page = _open(browser, served)
        page.select_option("#workflow", label="Narrow")
        doing = _lane(page, "Doing")
        doing.locator(".queued .card[data-title='Second in line']").wait_for(timeout=5_000)
        assert doing.locator(".wip").inner_text() == "1 / 1"
        assert "full" in (doing.locator(".wip").get_attribute("class") or "")
        assert doing.locator(".queued-head").inner_text().lower().startswith("queued")
        assert doing.locator(".lane-cards .card[data-title='First in']").count() == 1
        assert doing.locator(".queued .badge.queued").count() == 1
        assert page.errors == []
    finally:
        assert served.stop() == 0
