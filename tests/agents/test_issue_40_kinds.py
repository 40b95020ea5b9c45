"""Issue 40 item 2: `merge_branch` as a durable entry action: once per arrival, a conflict sent
back to `on_conflict_step` with the paths in the agent's next prompt (or the marker failed
naming them), and a worker that lost its claim never moves a ref.

Real git repositories; the board on both databases; real exec agents for the prompt."""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from core import faults, worker
from core.errors import LanewayError
from core.host import Host
from tests.agents.changes_kit import (
    commit_on,
    merges_on,
    person_repo,
    show,
    task_with_work,
    trailers_on,
)
from tests.agents.conftest import enqueue
from tests.agents.test_worktrees import git
from tests.conftest import open_host
from tests.fencing.test_fencing import take_lock_away

pytestmark = pytest.mark.slow  # git, agents and laneway processes: the subprocess tier

LANDING = textwrap.dedent(
    """\
    id: landing
    name: Landing
    steps:
      - id: work
        name: Work
        position: 0
        is_start_step: true
        allow_manual_move: true
      - id: merge
        name: Merge
        position: 1
        allow_manual_move: true
        events:
          on_enter:
            - type: merge_branch
              config: {CONFIG}
      - id: done
        name: Done
        position: 2
        allow_manual_move: true
    """
)


@pytest.fixture(autouse=True)
def _worktrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANEWAY_WORKTREES", str(tmp_path / "worktrees"))


def landing(host: Host, tmp_path: Path, repo: Path, config: str) -> str:
    path = tmp_path / "landing.yml"
    path.write_text(LANDING.replace("{CONFIG}", config))
    (wf,) = host.workflows.import_file(path)
    host.workflows.set_repository(wf.id, str(repo), None)
    return wf.id


def markers(host: Host, task: str) -> list[dict[str, Any]]:
    return [
        {"kind": m.kind, "state": m.state, "cause": m.cause, "entry_id": e.id}
        for e, found in host.entries.list(task=task)
        for m in found
    ]


@pytest.mark.parametrize("strategy", ["merge", "squash", "rebase"])
def test_issue_40_item_2_merge_branch_lands_once_per_arrival(
    host: Host, tmp_path: Path, strategy: str
) -> None:
    """Arriving at Merge lands the branch once, its commit carrying the entry's trailer
    (squash, rebase) or the branch's tip (merge); the marker is done naming the commit. A
    second arrival with nothing new merges nothing more."""
    repo = person_repo(tmp_path)
    wf = landing(host, tmp_path, repo, f"{{strategy: {strategy}}}")
    task, _ = task_with_work(host, wf, {"feature.txt": "one\n"})
    host.tasks.move(task, "Merge")

    (marker,) = markers(host, task)
    assert marker["state"] == "done", marker
    assert show(repo, "main:feature.txt") == "one\n"
    if strategy == "merge":
        assert merges_on(repo) == 1
    else:
        assert trailers_on(repo, marker["entry_id"]) == 1
    head = git(repo, "rev-parse", "main")
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["merge"]["commit"] == head

    host.tasks.move(task, "Work")
    host.tasks.move(task, "Merge")
    assert git(repo, "rev-parse", "main") == head
    assert [m["state"] for m in markers(host, task)] == ["done", "done"]


def _conflicting(host: Host, tmp_path: Path, config: str) -> tuple[Path, str, str]:
    repo = person_repo(tmp_path)
    wf = landing(host, tmp_path, repo, config)
    task, _ = task_with_work(host, wf, {"README.md": "agent's\n", "src/app.py": "print('agent')\n"})
    commit_on(repo, "main", "README.md", "person's\n", "readme")
    commit_on(repo, "main", "src/app.py", "print('person')\n", "app")
    return repo, wf, task


PROMPT_KEEPER = textwrap.dedent(
    """\
    import sys
    prompt = sys.stdin.read()
    with open(sys.argv[1], "a") as out:
        out.write(prompt + "\\n=====\\n")
    """
)


def test_issue_40_item_2_a_conflict_goes_back_and_the_next_prompt_names_the_paths(
    host: Host, tmp_path: Path
) -> None:
    """With on_conflict_step, a conflict moves the task there (the base untouched, the marker
    done saying so), and the agent's next prompt says to rebase onto main naming every path."""
    prompts = tmp_path / "prompts.txt"
    agent = host.profiles.add(
        "coder", command=[sys.executable, "-c", PROMPT_KEEPER, str(prompts)]
    ).id
    repo, _, task = _conflicting(host, tmp_path, "{strategy: squash, on_conflict_step: Work}")
    enqueue(host, agent, task)
    assert worker.work(host, once=True).as_dict()["finished"] == 1
    main_before = git(repo, "rev-parse", "main")

    host.tasks.move(task, "Merge")

    assert git(repo, "rev-parse", "main") == main_before
    moved = host.tasks.get(task)
    assert host.workflows.step_by_id(moved.workflow_step_id or "")[1].name == "Work"
    (marker,) = markers(host, task)
    assert marker["state"] == "done"
    assert "README.md" in marker["cause"]
    assert "src/app.py" in marker["cause"]

    enqueue(host, agent, task)
    assert worker.work(host, once=True).as_dict()["finished"] == 1
    second = prompts.read_text().split("=====")[1]
    assert "rebase onto main: conflicts in README.md, src/app.py" in second


def test_issue_40_item_2_without_on_conflict_step_the_marker_fails_naming_the_paths(
    host: Host, tmp_path: Path
) -> None:
    repo, _, task = _conflicting(host, tmp_path, "{strategy: merge}")
    main_before = git(repo, "rev-parse", "main")
    host.tasks.move(task, "Merge")
    (marker,) = markers(host, task)
    assert marker["state"] == "failed"
    assert "conflicts in README.md, src/app.py" in marker["cause"]
    assert git(repo, "rev-parse", "main") == main_before
    moved = host.tasks.get(task)
    assert host.workflows.step_by_id(moved.workflow_step_id or "")[1].name == "Merge"


def test_issue_40_item_2_a_fenced_worker_never_moves_a_ref(db_url: str, tmp_path: Path) -> None:
    """Host A claims the merge and computes it; its liveness lock is taken away before the
    swap: A moves no ref and settles nothing. The next process finds A's epoch dead and
    merges, once."""
    with open_host(db_url) as a:
        repo = person_repo(tmp_path)
        wf = landing(a, tmp_path, repo, "{strategy: squash}")
        task, _ = task_with_work(a, wf, {"feature.txt": "one\n"})
        main_before = git(repo, "rev-parse", "main")
        pause = faults.pause_at("merge.after_commit")
        moving = threading.Thread(target=lambda: a.tasks.move(task, "Merge"))
        moving.start()
        try:
            assert pause.reached.wait(30)
            take_lock_away(a)
        finally:
            pause.release()
        moving.join(60)
        assert git(repo, "rev-parse", "main") == main_before
        (marker,) = markers(a, task)
        assert marker["state"] == "in_progress"
    with open_host(db_url) as b:
        (marker,) = markers(b, task)
        assert marker["state"] == "done"
        assert trailers_on(repo, marker["entry_id"]) == 1
        assert show(repo, "main:feature.txt") == "one\n"


def test_issue_40_item_4_line_comments_reach_the_next_prompt_as_path_line_text(
    host: Host, tmp_path: Path
) -> None:
    """`task comment --file --line` (here through the service both the CLI and HTTP call):
    the comment keeps its file and line, and the agent's next prompt gives it as
    `PATH:N: TEXT` with its author, apart from the plain comments."""
    prompts = tmp_path / "prompts.txt"
    agent = host.profiles.add(
        "coder", command=[sys.executable, "-c", PROMPT_KEEPER, str(prompts)]
    ).id
    repo = person_repo(tmp_path)
    wf = landing(host, tmp_path, repo, "{}")
    task, _ = task_with_work(host, wf, {"feature.txt": "one\ntwo\n"})
    enqueue(host, agent, task)
    assert worker.work(host, once=True).as_dict()["finished"] == 1

    on_line = host.comments.add(
        task, "say what it does", author="alice", file="feature.txt", line=2
    )
    assert (on_line.file, on_line.line) == ("feature.txt", 2)
    host.comments.add(task, "looks good otherwise", author="bob")
    enqueue(host, agent, task)
    assert worker.work(host, once=True).as_dict()["finished"] == 1
    second = prompts.read_text().split("=====")[1]
    assert "- feature.txt:2: say what it does (alice)" in second
    assert "- bob: looks good otherwise" in second

    with pytest.raises(LanewayError, match="needs both"):
        host.comments.add(task, "where?", file="feature.txt")
    with pytest.raises(LanewayError, match="must be 1 or more"):
        host.comments.add(task, "where?", file="feature.txt", line=0)


def test_issue_40_item_6_the_code_and_merge_template_ends_in_a_merge(
    host: Host, tmp_path: Path
) -> None:
    """The shipped `code-and-merge` template: moved to Merge, a card's branch lands on main
    (squash); a card that conflicts goes back to In Progress. `workflow check` finds nothing."""
    repo = person_repo(tmp_path)
    wf = host.workflows.create_from_template("code-and-merge").id
    host.workflows.set_repository(wf, str(repo), None)
    assert host.workflows.check(wf) == []
    task, _ = task_with_work(host, wf, {"feature.txt": "one\n"})
    host.tasks.move(task, "Merge")
    (marker,) = markers(host, task)
    assert marker["state"] == "done", marker
    assert trailers_on(repo, marker["entry_id"]) == 1

    clash, _ = task_with_work(host, wf, {"README.md": "agent's\n"}, title="clash")
    commit_on(repo, "main", "README.md", "person's\n", "readme")
    host.tasks.move(clash, "Merge")
    moved = host.tasks.get(clash)
    assert host.workflows.step_by_id(moved.workflow_step_id or "")[1].name == "In Progress"


def test_issue_40_item_3_a_fenced_worker_never_pushes(db_url: str, tmp_path: Path) -> None:
    """push_branch: host A claims the push; its lock is taken away before the push: nothing
    reaches the remote from A, and the next process pushes once."""
    with open_host(db_url) as a:
        repo = person_repo(tmp_path)
        remote = tmp_path / "remote.git"
        git(tmp_path, "init", "-q", "--bare", str(remote))
        git(repo, "remote", "add", "origin", str(remote))
        path = tmp_path / "pushing.yml"
        path.write_text(
            LANDING.replace("merge_branch", "push_branch").replace("config: {CONFIG}", "")
        )
        (wf,) = a.workflows.import_file(path)
        a.workflows.set_repository(wf.id, str(repo), None)
        a.workflows.set_remote(wf.id, "origin")
        task, _ = task_with_work(a, wf.id, {"feature.txt": "one\n"})
        branch = f"laneway/{task[-8:]}"
        pause = faults.pause_at("dispatch.after_claim")
        moving = threading.Thread(target=lambda: a.tasks.move(task, "Merge"))
        moving.start()
        try:
            assert pause.reached.wait(30)
            take_lock_away(a)
        finally:
            pause.release()
        moving.join(60)
        assert show(remote, branch) is None
        (marker,) = markers(a, task)
        assert marker["state"] == "in_progress"
    with open_host(db_url) as b:
        (marker,) = markers(b, task)
        assert marker["state"] == "done"
        assert git(remote, "rev-parse", branch) == git(repo, "rev-parse", branch)
