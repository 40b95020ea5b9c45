"""Issue 40 item 4 (pull requests, through a forge plugin): `open_pull_request` pushes the
branch and opens its pull request once per arrival, keyed by the branch (an update, never a
second); `sync_pull_request` brings review comments back as line comments that fire
on_comment, and a merged pull request moves the task; a forge answering 401/422/500 is one
line. A GitHub stand-in on loopback answers; the repositories are real; both databases."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.errors import LanewayError
from core.host import Host
from core.store import events
from tests.agents.changes_kit import person_repo, task_with_work
from tests.agents.conftest import laneway, script_env
from tests.agents.github_standin import Forge, github
from tests.agents.test_worktrees import git
from tests.conftest import open_host, wait_for_dead_processes

pytestmark = pytest.mark.slow  # git, agents and laneway processes: the subprocess tier

FLOW = textwrap.dedent(
    """\
    id: reviewing
    name: Reviewing
    steps:
      - id: work
        name: Work
        position: 0
        is_start_step: true
        allow_manual_move: true
      - id: review
        name: Review
        position: 1
        allow_manual_move: true
        events:
          on_enter:
            - type: open_pull_request
              config: {title: "{title} (laneway)", draft: true}
          on_heartbeat:
            - type: sync_pull_request
              config: {on_merged_step: Done}
          on_comment:
            - type: move_to_step
              config: {step_id: work}
      - id: done
        name: Done
        position: 2
        allow_manual_move: true
    """
)


@pytest.fixture
def forge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Forge]:
    monkeypatch.setenv("LANEWAY_WORKTREES", str(tmp_path / "wt"))
    monkeypatch.setenv("TEST_GITHUB_TOKEN", "good-token")
    with github() as stand_in:
        yield stand_in


def reviewing(host: Host, tmp_path: Path, forge: Forge) -> tuple[str, Path, Path]:
    repo = person_repo(tmp_path)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    (tmp_path / "reviewing.yml").write_text(FLOW)
    (wf,) = host.workflows.import_file(tmp_path / "reviewing.yml")
    host.workflows.set_repository(wf.id, str(repo), None)
    host.workflows.set_remote(wf.id, "origin")
    host.changes.set_forge(
        wf.id, "github", repo=forge.repo, url=forge.url, token_env="TEST_GITHUB_TOKEN"
    )
    return wf.id, repo, remote


def markers(host: Host, task: str) -> list[dict[str, Any]]:
    return [
        {"kind": m.kind, "state": m.state, "cause": m.cause}
        for _e, found in host.entries.list(task=task)
        for m in found
    ]


def step_of(host: Host, task: str) -> str:
    found = host.tasks.get(task)
    return host.workflows.step_by_id(found.workflow_step_id or "")[1].name


def heartbeat(host: Host, task: str, slot: int) -> None:
    host.engine.handle_trigger(task, "on_heartbeat", operation_id=f"heartbeat:{task}:test:{slot}")


def test_issue_40_item_4_a_pull_request_opens_once_and_its_review_comes_back(
    host: Host, tmp_path: Path, forge: Forge
) -> None:
    wf, repo, remote = reviewing(host, tmp_path, forge)
    task, _ = task_with_work(host, wf, {"feature.txt": "one\ntwo\n"}, title="Add feature")
    branch = f"laneway/{task[-8:]}"
    host.tasks.move(task, "Review")

    (marker,) = markers(host, task)
    assert marker["state"] == "done", marker
    assert forge.opened == 1
    (pull,) = forge.pulls.values()
    assert pull["head"]["ref"] == branch
    assert pull["base"]["ref"] == "main"
    assert pull["title"] == "Add feature (laneway)"
    assert pull["draft"] is True
    assert git(remote, "rev-parse", branch) == git(repo, "rev-parse", branch)
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["pull_request"]["number"] == 1
    assert record["pull_request"]["state"] == "open"

    # a second arrival updates the one pull request of the branch
    host.tasks.move(task, "Work")
    host.tasks.update(task, title="Add the feature")
    host.tasks.move(task, "Review")
    assert forge.opened == 1
    assert forge.pulls[1]["title"] == "Add the feature (laneway)"

    # review comments come back as line comments (once each), firing on_comment
    forge.review(1, "feature.txt", 2, "name two better", "octocat")
    heartbeat(host, task, 1)
    heartbeat(host, task, 2)
    (comment,) = host.comments.list(task)
    assert (comment.file, comment.line, comment.body) == ("feature.txt", 2, "name two better")
    assert comment.author == "github:octocat"
    assert step_of(host, task) == "Work"  # on_comment moved it

    # a merged pull request is an event that moves the task
    host.tasks.move(task, "Review")
    forge.merge(1)
    heartbeat(host, task, 3)
    assert step_of(host, task) == "Done"
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["pull_request"]["state"] == "merged"
    assert len(host.comments.list(task)) == 1


def test_issue_40_item_4_a_sync_that_fails_before_its_move_leaves_the_merge_to_the_next(
    host: Host, tmp_path: Path, forge: Forge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync that sees the merge and fails before the task moves (here the move raises once,
    as a database gone away would) records nothing of the merge: the next sync sees it again
    and moves the task to Done. (Recorded first, every later sync found nothing changed and
    the card stood at Review for good.)"""
    from core import arrival

    wf, _, _ = reviewing(host, tmp_path, forge)
    task, _ = task_with_work(host, wf, {"feature.txt": "one\n"})
    host.tasks.move(task, "Review")
    forge.merge(1)
    real = arrival.move
    failures = [LanewayError("the database went away")]

    def move_once_failing(*args: Any, **kwargs: Any) -> Any:
        if failures and kwargs.get("label") == "pull_request_merged":
            raise failures.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(arrival, "move", move_once_failing)
    heartbeat(host, task, 1)
    assert not failures
    assert step_of(host, task) == "Review"
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["pull_request"]["state"] == "open"  # the merge not recorded: still to act on
    heartbeat(host, task, 2)
    assert step_of(host, task) == "Done"
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["pull_request"]["state"] == "merged"


def test_issue_40_item_4_a_returning_task_reopens_its_closed_pull_request_or_opens_a_new_one(
    host: Host, tmp_path: Path, forge: Forge
) -> None:
    """A task back at Review after its pull request was closed unmerged gets that pull request
    reopened (its review kept), never a second; after a merge, a new one: a merged pull
    request takes no more commits, and updating it left the card waiting on a review nobody
    could give."""
    wf, _, _ = reviewing(host, tmp_path, forge)
    task, path = task_with_work(host, wf, {"feature.txt": "one\n"})
    host.tasks.move(task, "Review")
    forge.close(1)
    heartbeat(host, task, 1)
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["pull_request"]["state"] == "closed"

    host.tasks.move(task, "Work")
    host.tasks.move(task, "Review")
    assert forge.opened == 1
    assert forge.pulls[1]["state"] == "open"
    record = host.tasks.get(task).workspace
    assert record is not None
    assert (record["pull_request"]["number"], record["pull_request"]["state"]) == (1, "open")

    forge.merge(1)
    heartbeat(host, task, 2)
    assert step_of(host, task) == "Done"
    host.tasks.move(task, "Work")  # more to do after the merge
    (path / "more.txt").write_text("more\n")
    host.tasks.move(task, "Review")
    assert forge.opened == 2
    assert forge.pulls[1]["merged"] is True
    assert forge.pulls[2]["state"] == "open"
    record = host.tasks.get(task).workspace
    assert record is not None
    assert (record["pull_request"]["number"], record["pull_request"]["state"]) == (2, "open")


def test_issue_40_item_4_every_review_comment_comes_back_past_the_first_page(
    host: Host, tmp_path: Path, forge: Forge
) -> None:
    """Review comments are read page by page (GitHub's `Link: rel="next"`), not only the first
    hundred; a next page off the forge's API host is refused (the token is not sent there)."""
    wf, _, _ = reviewing(host, tmp_path, forge)
    task, _ = task_with_work(host, wf, {"feature.txt": "one\n"})
    host.tasks.move(task, "Review")
    for n in range(150):
        forge.review(1, "feature.txt", 1, f"note {n}", "octocat")
    synced = host.changes.sync_pull_request(task)
    assert synced["comments_added"] == 150
    bodies = {c.body for c in host.comments.list(task)}
    assert bodies == {f"note {n}" for n in range(150)}
    pages = [p for m, p in forge.requests if p.endswith("/pulls/1/comments")]
    assert len(pages) == 2

    forge.next_elsewhere = True
    with pytest.raises(LanewayError, match="a next page outside"):
        host.changes.sync_pull_request(task)
    assert all("elsewhere" not in p for _m, p in forge.requests)


def test_issue_40_item_4_a_reviews_summary_and_the_conversation_come_back_to_the_agent(
    host: Host, tmp_path: Path, forge: Forge
) -> None:
    """A reviewer who requests changes in the review's summary alone, or answers in the pull
    request's conversation, reaches the agent as a line comment does: a plain comment each,
    oldest first, once whoever syncs, firing on_comment. Summaries without text, drafts,
    dismissed reviews and bots' comments do not wake it."""
    wf, _, _ = reviewing(host, tmp_path, forge)
    task, _ = task_with_work(host, wf, {"feature.txt": "one\n"})
    host.tasks.move(task, "Review")
    forge.submit(1, "CHANGES_REQUESTED", "please add a test", "alice")
    forge.say(1, "and say it in the README", "bob")
    forge.say(1, "Preview deployed", "previews[bot]", bot=True)
    forge.submit(1, "COMMENTED", "", "carol")  # the review that carries line comments
    forge.review(1, "feature.txt", 1, "typo", "carol")
    forge.submit(1, "PENDING", "half a thought", "dave")
    forge.submit(1, "DISMISSED", "block this", "frank")
    forge.submit(1, "COMMENTED", "Coverage 80%", "coverage[bot]", bot=True)
    forge.submit(1, "APPROVED", "fine once tested", "erin")

    synced = host.changes.sync_pull_request(task)
    assert synced["comments_added"] == 4
    said = [(c.author, c.file, c.line, c.body) for c in host.comments.list(task)]
    assert said == [
        ("github:alice", None, None, "Changes requested: please add a test"),
        ("github:bob", None, None, "and say it in the README"),
        ("github:carol", "feature.txt", 1, "typo"),
        ("github:erin", None, None, "Approved: fine once tested"),
    ]
    assert step_of(host, task) == "Work"  # on_comment fired
    fired = [e for e in events.read_all(host.store, task_id=task) if e.type == "comment.added"]
    assert len(fired) == 4

    # read again, from the step the comments moved it to: nothing twice
    again = host.changes.sync_pull_request(task)
    assert again["comments_added"] == 0
    assert len(host.comments.list(task)) == 4
    lists = {p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for _m, p in forge.requests}
    assert {"1/comments", "1/reviews"} <= lists


@pytest.mark.parametrize(
    ("status", "said"),
    [(401, "answered 401: Bad credentials"), (422, "answered 422"), (500, "answered 500")],
)
def test_issue_40_item_4_a_forge_refusing_is_one_line_and_nothing_is_lost(
    host: Host,
    tmp_path: Path,
    forge: Forge,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
    said: str,
) -> None:
    wf, _, _ = reviewing(host, tmp_path, forge)
    task, _ = task_with_work(host, wf, {"feature.txt": "one\n"})
    if status == 401:
        monkeypatch.setenv("TEST_GITHUB_TOKEN", "wrong")
    else:
        forge.fail_next = (status, "Validation Failed" if status == 422 else "Server Error")
    host.tasks.move(task, "Review")
    (marker,) = markers(host, task)
    assert marker["state"] == "failed"
    assert said in marker["cause"]
    assert "\n" not in marker["cause"]
    assert forge.opened == 0
    monkeypatch.setenv("TEST_GITHUB_TOKEN", "good-token")
    host.tasks.move(task, "Work")
    host.tasks.move(task, "Review")
    assert forge.opened == 1

    monkeypatch.delenv("TEST_GITHUB_TOKEN")
    with pytest.raises(LanewayError, match="TEST_GITHUB_TOKEN is not set"):
        host.changes.sync_pull_request(task)
    with pytest.raises(LanewayError, match="--forge-repo OWNER/NAME"):
        host.changes.set_forge(wf, "github", repo="nope", url=None, token_env="X")
    with pytest.raises(LanewayError, match="no loaded plugin declares it"):
        host.changes.set_forge(wf, "gitea", repo="a/b", url=None, token_env="X")


@pytest.mark.slow
@pytest.mark.parametrize("point", ["pull_request.after_open", "pull_request.before_marker"])
def test_issue_40_item_4_killed_around_the_pull_request_then_recover_opens_exactly_one(
    db_url: str, tmp_path: Path, forge: Forge, point: str
) -> None:
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt"), "TEST_GITHUB_TOKEN": "good-token"}
    with open_host(db_url) as host:
        wf, _, _ = reviewing(host, tmp_path, forge)
        task, _ = task_with_work(host, wf, {"feature.txt": "one\n"})
    crashed = laneway(
        "--db", db_url, "task", "move", task, "Review", cwd=tmp_path,
        env={**env, "LANEWAY_FAULT": point},
    )  # fmt: skip
    assert crashed.returncode == 99, crashed.stderr
    wait_for_dead_processes(db_url)
    assert forge.opened == 1
    done = laneway("--db", db_url, "recover", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    with open_host(db_url) as host:
        (marker,) = markers(host, task)
        assert marker["state"] == "done", marker
    assert forge.opened == 1
    assert [m for m, p in forge.requests if m == "POST"] == ["POST"]


@pytest.mark.slow
def test_issue_40_item_4_killed_between_a_syncs_move_and_its_record_moves_once(
    db_url: str, tmp_path: Path, forge: Forge
) -> None:
    """kill -9 (`pull_request.after_move`) of the process syncing a merged pull request, after
    it moved the task and before it recorded the merge: the task stands at Done, moved once;
    recovery and later syncs move nothing and open nothing (one pull request, one POST)."""
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt"), "TEST_GITHUB_TOKEN": "good-token"}
    with open_host(db_url) as host:
        wf, _, _ = reviewing(host, tmp_path, forge)
        task, _ = task_with_work(host, wf, {"feature.txt": "one\n"})
        host.tasks.move(task, "Review")
    forge.merge(1)
    syncing = (
        "import sys\nfrom core.host import Host\n"
        "with Host.open(sys.argv[1]) as host:\n"
        "    host.engine.handle_trigger(sys.argv[2], 'on_heartbeat', operation_id='hb:1')\n"
    )
    crashed = subprocess.run(
        [sys.executable, "-c", syncing, db_url, task],
        check=False,
        cwd=tmp_path,
        env={**script_env(), **env, "LANEWAY_FAULT": "pull_request.after_move"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert crashed.returncode == 99, crashed.stderr
    wait_for_dead_processes(db_url)
    done = laneway("--db", db_url, "recover", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    with open_host(db_url) as host:
        assert step_of(host, task) == "Done"
        heartbeat(host, task, 2)  # Done syncs nothing: no second move
        assert step_of(host, task) == "Done"
        done = host.tasks.get(task).workflow_step_id
        moved = [
            e.data for e in events.read_all(host.store, task_id=task) if e.type == "task.moved"
        ]
        assert [(m["entry_path"], m["to_step_id"] == done) for m in moved] == [
            ("E2", False),  # the person's move to Review
            ("E1", True),  # the merge's, once
        ]
    assert forge.opened == 1
    assert [m for m, _p in forge.requests if m == "POST"] == ["POST"]


@pytest.mark.one_database
@pytest.mark.slow
def test_issue_40_item_4_workflow_set_forge_on_the_command_line(
    db_url: str, tmp_path: Path, forge: Forge
) -> None:
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    with open_host(db_url) as host:
        wf, _, _ = reviewing(host, tmp_path, forge)
    shown = laneway(
        "--db", db_url, "--json", "workflow", "set", wf, "--forge", "github",
        "--forge-repo", "acme/app", "--forge-url", forge.url, "--forge-token-env", "GH_TOKEN",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    import json

    assert json.loads(shown.stdout)["forge"] == {
        "kind": "github", "repo": "acme/app", "url": forge.url, "token_env": "GH_TOKEN",
    }  # fmt: skip
    bad = laneway(
        "--db", db_url, "workflow", "set", wf, "--forge", "github", "--forge-repo", "acme",
        "--forge-token-env", "GH_TOKEN", cwd=tmp_path, env=env,
    )  # fmt: skip
    assert bad.returncode == 1
    assert len(bad.stderr.strip().splitlines()) == 1
    cleared = laneway(
        "--db", db_url, "--json", "workflow", "set", wf, "--forge", "", cwd=tmp_path, env=env
    )
    assert json.loads(cleared.stdout)["forge"] is None


@pytest.mark.one_database
def test_issue_40_item_6_the_code_and_pull_request_template_opens_a_pull_request(
    host: Host, tmp_path: Path, forge: Forge
) -> None:
    repo = person_repo(tmp_path)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    wf = host.workflows.create_from_template("code-and-pull-request").id
    host.workflows.set_repository(wf, str(repo), None)
    host.workflows.set_remote(wf, "origin")
    host.changes.set_forge(
        wf, "github", repo=forge.repo, url=forge.url, token_env="TEST_GITHUB_TOKEN"
    )
    assert host.workflows.check(wf) == []
    task, _ = task_with_work(host, wf, {"feature.txt": "one\n"}, title="Ship it")
    host.tasks.move(task, "Review")
    assert forge.opened == 1
    assert forge.pulls[1]["title"] == "Ship it"
    forge.merge(1)
    heartbeat(host, task, 1)
    assert step_of(host, task) == "Done"


def test_issue_40_item_4_a_fenced_worker_never_opens_a_pull_request(
    db_url: str, tmp_path: Path, forge: Forge
) -> None:
    import threading

    from core import faults
    from tests.fencing.test_fencing import take_lock_away

    with open_host(db_url) as a:
        wf, _, _ = reviewing(a, tmp_path, forge)
        task, _ = task_with_work(a, wf, {"feature.txt": "one\n"})
        pause = faults.pause_at("dispatch.after_claim")
        moving = threading.Thread(target=lambda: a.tasks.move(task, "Review"))
        moving.start()
        try:
            assert pause.reached.wait(30)
            take_lock_away(a)
        finally:
            pause.release()
        moving.join(60)
        assert forge.opened == 0
    with open_host(db_url) as b:
        (marker,) = markers(b, task)
        assert marker["state"] == "done"
    assert forge.opened == 1
