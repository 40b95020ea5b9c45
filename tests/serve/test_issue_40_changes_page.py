"""Issue 40 item 4 on the page (HTTP.md, "Phase 4 on the page"), in Debian's chromium: click a
line of the Changes panel's patch to comment on it (the comment keeps file and line, and the
agent's next prompt gets it), Merge lands the branch and the panel shows it merged, Push where
the workflow has a remote, and a conflict is shown with its paths."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.agents.changes_kit import commit_on, person_repo, show, task_with_work
from tests.agents.test_issue_40_kinds import landing
from tests.agents.test_worktrees import git
from tests.conftest import open_host
from tests.serve.conftest import start_serve
from tests.serve.page_kit import open_page, serious_violations
from tests.serve.test_serve_page import _card, browser  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def test_issue_40_item_4_page_line_comment_merge_push_and_conflict(
    browser: Any,  # noqa: F811 - the fixture imported above
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    monkeypatch.setenv("LANEWAY_WORKTREES", env["LANEWAY_WORKTREES"])
    repo = person_repo(tmp_path)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    with open_host(sqlite_url) as host:
        wf = landing(host, tmp_path, repo, "{}")
        host.workflows.set_remote(wf, "origin")
        task, _ = task_with_work(host, wf, {"feature.txt": "one\ntwo\n"}, title="Worked card")
        clash, _ = task_with_work(host, wf, {"README.md": "agent's\n"}, title="Clashing card")
    commit_on(repo, "main", "README.md", "person's\n", "readme")
    served = start_serve(sqlite_url, tmp_path, env=env)
    try:
        page = open_page(browser, served, bypass_csp=True)  # axe goes in as an inline script
        _card(page, "Worked card").click()
        changes = page.locator(".panel-section", has_text="Changes")
        changes.locator(".patch").wait_for(timeout=10_000)

        line = changes.locator(".patch .line.commentable[data-file='feature.txt'][data-line='2']")
        assert line.inner_text().strip() == "+two"
        line.click()
        page.locator("#line-comment-text").fill("say what two is for")
        page.locator("form.line-comment button[type=submit]").click()
        page.locator(".comments .comment-at", has_text="feature.txt:2").wait_for(timeout=10_000)
        with open_host(sqlite_url) as host:
            (comment,) = host.comments.list(task)
        assert (comment.file, comment.line, comment.body) == (
            "feature.txt",
            2,
            "say what two is for",
        )

        page.locator("#push-button").click()
        page.locator(".changes", has_text="Pushed").wait_for(timeout=10_000)
        assert git(remote, "rev-parse", f"laneway/{task[-8:]}") == git(
            repo, "rev-parse", f"laneway/{task[-8:]}"
        )
        page.locator("#merge-strategy").select_option("squash")
        page.locator("#merge-button").click()
        page.locator(".changes .landed", has_text="merged").wait_for(timeout=10_000)
        assert "into main (squash)" in page.locator(".changes .landed").inner_text()
        assert show(repo, "main:feature.txt") == "one\ntwo\n"

        page.locator("#detail-close").click()
        _card(page, "Clashing card").click()
        page.locator("#detail-title", has_text="Clashing card").wait_for(timeout=10_000)
        page.locator("#merge-button").wait_for(timeout=10_000)
        before = git(repo, "rev-parse", "main")
        page.locator("#merge-button").click()
        page.locator(".changes .conflict", has_text="README.md").wait_for(timeout=10_000)
        assert page.locator(".changes .conflict-path").all_inner_texts() == ["README.md"]
        assert git(repo, "rev-parse", "main") == before
        page.screenshot(path=str(tmp_path / "changes-landing.png"))
        if os.environ.get("LANEWAY_AXE"):
            assert serious_violations(page) == []
        # the refused merge's answer is logged by the browser as a failed load; nothing else
        assert [e for e in page.errors if "409" not in e] == []
        assert clash
    finally:
        served.stop()
