"""The Changes panel (issue 23, HTTP.md The board page: "its diff when it has a worktree") in
Debian's chromium: a card whose agent worked in its git worktree shows its files with +/-
counts and the unified patch, coloured by line kind; a large patch is cut with a note."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import enqueue, laneway, plain_workflow
from tests.agents.test_worktrees import make_repo
from tests.conftest import open_host
from tests.serve.conftest import start_serve
from tests.serve.test_serve_page import _card, _open, browser  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

BIG = 3000
"""Lines of the large file: more than the page draws (it cuts at 2,000)."""


def test_the_changes_panel_shows_files_counts_and_the_patch_and_cuts_a_large_one(
    browser: Any,  # noqa: F811 - the fixture imported above
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"app.py": "a = 1\nb = 2\n"})
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    code = (
        "import sys; sys.stdin.read()\n"
        "open('app.py', 'w').write('a = 1\\nb = 3\\nc = 4\\n')\n"
        f"open('big.txt', 'w').write(''.join(f'line {{i}}\\n' for i in range({BIG})))\n"
    )
    with open_host(sqlite_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.workflows.set_repository(wf, str(repo), None)
        task = host.tasks.create(workflow=wf, title="Worked card").id
        host.tasks.create(workflow=wf, title="Fresh card")
        agent = host.profiles.add("writer", command=[sys.executable, "-c", code]).id
        enqueue(host, agent, task)
    done = laneway("--db", sqlite_url, "worker", "--once", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    served = start_serve(sqlite_url, tmp_path, env=env)
    try:
        page = _open(browser, served)
        _card(page, "Worked card").click()
        changes = page.locator(".panel-section", has_text="Changes")
        changes.locator(".patch").wait_for(timeout=10_000)
        assert changes.locator("h3 .count").inner_text() == "2"
        rows = changes.locator(".changed-files li")
        assert rows.nth(0).locator(".path").inner_text() == "app.py"
        assert rows.nth(0).locator(".add").inner_text() == "+2"
        assert rows.nth(0).locator(".del").inner_text() == "\u22121"
        assert rows.nth(1).locator(".path").inner_text() == "big.txt"
        assert rows.nth(1).locator(".status").inner_text() == "added"
        assert rows.nth(1).locator(".add").inner_text() == f"+{BIG}"
        assert changes.locator(".patch .line.del").all_inner_texts()[0].strip() == "-b = 2"
        assert "+b = 3" in [
            t.strip() for t in changes.locator(".patch .line.add").all_inner_texts()
        ]
        assert changes.locator(".patch .line.hunk").count() == 2
        assert changes.locator(".patch .line").count() == 2000
        assert f"laneway task diff {task}" in changes.locator(".cut").inner_text()
        colours = page.evaluate(
            "() => ['add', 'del'].map((k) => getComputedStyle("
            "document.querySelector(`.patch .line.${k}`)).backgroundColor)"
        )
        assert colours[0] != colours[1]
        page.screenshot(path=str(tmp_path / "changes.png"))
        assert page.errors == []

        # a card no turn has worked has no worktree, so no Changes panel
        page.locator("#detail-close").click()
        _card(page, "Fresh card").click()
        page.locator("#detail-title", has_text="Fresh card").wait_for(timeout=10_000)
        # (the headings are styled upper case)
        headings = [h.casefold() for h in page.locator(".panel-section h3").all_inner_texts()]
        assert any(h.startswith("entries") for h in headings)
        assert not any(h.startswith("changes") for h in headings)
    finally:
        served.stop()
