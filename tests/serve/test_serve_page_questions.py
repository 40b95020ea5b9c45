"""Issue 41 item 6 on the board page (HTTP.md phase 4), in a real browser: a question an agent
asked is a form in the task's panel, arriving live; the card says it waits for a person; an
answer that does not fit a field is refused naming the field; the form's answer reaches the
board typed, and the form and the card's badge go."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import session_with_run
from tests.conftest import open_host
from tests.serve.conftest import Served, laneway, start_serve
from tests.serve.page_kit import browser, open_page, serious_violations
from tests.serve.test_serve_page import _card

__all__ = ["browser"]  # the module's browser fixture, used by name

pytestmark = pytest.mark.slow

TITLE = "Deploy the site"
FIELDS = [
    {"name": "target", "type": "string", "title": "Target", "choices": ["staging", "prod"]},
    {"name": "replicas", "type": "integer", "title": "Replicas"},
    {"name": "dry_run", "type": "boolean", "title": "Dry run", "required": False},
    {"name": "note", "type": "string", "required": False},
]


@pytest.fixture
def board(tmp_path: Path) -> Iterator[tuple[str, Served, tuple[str, str, str]]]:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    laneway(db, "init")
    with open_host(db) as host:
        ids = session_with_run(host, tmp_path, title=TITLE)
    served = start_serve(db, tmp_path)
    try:
        yield db, served, ids
    finally:
        served.stop()


def test_issue_41_item_6_a_question_is_a_form_in_the_panel_and_the_card_waits_for_a_person(
    browser: Any, board: tuple[str, Served, tuple[str, str, str]]
) -> None:
    db, served, (task_id, session_id, run_id) = board
    page = open_page(browser, served, bypass_csp=True)  # axe goes in as an inline script
    card = _card(page, TITLE)
    card.click()
    page.locator("#detail-title", has_text=TITLE).wait_for(timeout=10_000)
    assert page.locator(".questions").count() == 0

    with open_host(db) as host:  # the agent asks while the panel is open: it arrives live
        asked = host.questions.ask(
            task_id, session_id, run_id=run_id, message="How shall I deploy?", fields=FIELDS
        )
    form = page.locator(f".questions form.question[data-question-id='{asked.id}']")
    form.wait_for(timeout=10_000)
    assert "How shall I deploy?" in form.inner_text()
    card.locator(".badge.person").wait_for(timeout=10_000)
    assert "waits for a person: its agent asks a question" in (
        card.locator(".waits").inner_text().lower()
    )
    page.locator("#detail-body > .waits-person").wait_for(timeout=10_000)
    assert form.get_by_label("Target").locator("option").all_inner_texts() == ["staging", "prod"]
    assert serious_violations(page) == []

    form.get_by_label("Target").select_option("prod")
    form.get_by_label("Replicas").fill("2.5")
    form.locator("button", has_text="Answer").click()
    page.locator(".toast", has_text="answer field 'replicas': expected an integer").wait_for(
        timeout=5_000
    )
    with open_host(db, read_only=True) as host:
        assert host.questions.get(asked.id).state == "pending"

    form.get_by_label("Replicas").fill("3")
    form.get_by_label("Dry run (optional)").select_option("true")
    form.locator("button", has_text="Answer").click()
    page.locator(".toast.ok", has_text="Question answered").wait_for(timeout=5_000)
    page.locator(".questions").wait_for(state="detached", timeout=10_000)
    card.locator(".badge.person").wait_for(state="detached", timeout=10_000)
    with open_host(db, read_only=True) as host:
        answered = host.questions.get(asked.id)
    assert (answered.state, answered.answer, answered.answered_by) == (
        "answered",
        {"target": "prod", "replicas": 3, "dry_run": True},
        "user:admin",  # signed in with the board's admin token (issue 44's actor)
    )
    # the browser logs the refused answer's 400 itself; nothing else went wrong
    assert [e for e in page.errors if "400" not in e] == []
    page.context.close()
