"""The task panel keeps every round's verdicts readable (issue 22 item 5: "the panel keep[s]
every round's verdicts readable after a new entry clears them"), in Debian's chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import open_host
from tests.serve.conftest import OfficeBoard, start_serve
from tests.serve.test_serve_page import _card, _open, browser

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the fixture, used by name


def test_the_panel_shows_a_cleared_rounds_rejection_and_its_reason(
    browser: Any, office: OfficeBoard, tmp_path: Path
) -> None:
    """Review rejected with a reason, then entered again: the panel lists round 1's verdict
    with its comment under Earlier rounds, while the seats wait for the new round."""
    with open_host(office.db) as host:
        host.tasks.move(office.task_id, "Review")
        host.decisions.record(
            office.task_id, "Review", office.seats["reviewer-1"], "rejected",
            comment="the retry path has no test",
        )  # fmt: skip
        host.tasks.move(office.task_id, "Review")
        title = host.tasks.get(office.task_id).title
    served = start_serve(office.db, tmp_path)
    try:
        page = _open(browser, served)
        _card(page, title).click()
        earlier = page.locator(".earlier-verdict")
        earlier.first.wait_for(timeout=5_000)
        assert earlier.count() == 1
        text = earlier.first.inner_text()
        assert "Round 1" in text
        assert "the retry path has no test" in text
        assert earlier.first.locator(".pill.verdict-rejected").count() == 1
        seats = page.locator(".panel-section", has_text="Decisions").locator(".pill.waiting")
        assert seats.count() == 2
        assert page.errors == []
    finally:
        served.stop()
