"""Issue 40 item 1: `task merge` lands a task's branch on its base branch without touching any
checkout, by compare-and-swap, and a conflict changes nothing and names every path.

Real git repositories made here; the board on both databases (the `host` fixture)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from core import faults, gitmerge
from core.errors import LanewayError
from core.host import Host
from core.store import tables as t
from tests.agents.changes_kit import (
    board_with_repo,
    checkout_state,
    commit_on,
    merges_on,
    person_repo,
    show,
    task_with_work,
)
from tests.agents.test_worktrees import git

pytestmark = pytest.mark.slow  # git, agents and laneway processes: the subprocess tier


@pytest.fixture(autouse=True)
def _worktrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANEWAY_WORKTREES", str(tmp_path / "worktrees"))


def _events(host: Host, task: str, kind: str) -> list[dict[str, object]]:
    import json

    with host.store.read() as conn:
        found = conn.execute(
            sa.select(t.board_events.c.data).where(
                t.board_events.c.task_id == task, t.board_events.c.type == kind
            )
        ).scalars()
        return [json.loads(d) for d in found]


@pytest.mark.parametrize("strategy", ["merge", "squash", "rebase"])
def test_issue_40_item_1_each_strategy_lands_the_agents_work_and_the_checkout_is_untouched(
    host: Host, tmp_path: Path, strategy: str
) -> None:
    """Merge, squash and rebase: the base branch has the agent's work (committed and
    uncommitted alike: laneway commits the rest first, saying so); the person's checkout on
    main, with its uncommitted and untracked files, is byte for byte what it was; the task
    records `merge` and a `task.merged` event is written; one line says how to see it."""
    repo = person_repo(tmp_path)
    wf = board_with_repo(host, tmp_path, repo)
    task, path = task_with_work(host, wf, {"feature.txt": "one\n"}, commit=True)
    (path / "later.txt").write_text("left uncommitted\n")
    before = checkout_state(repo)
    main_before = git(repo, "rev-parse", "main")

    merged = host.changes.merge(task, strategy=strategy)

    assert checkout_state(repo) == before
    assert merged["into"] == "main"
    assert merged["strategy"] == strategy
    assert merged["committed"] is not None  # later.txt was committed by laneway first
    assert "laneway" in git(path, "log", "-1", "--format=%an %s")
    head = git(repo, "rev-parse", "main")
    assert merged["commit"] == head != main_before
    assert show(repo, "main:feature.txt") == "one\n"
    assert show(repo, "main:later.txt") == "left uncommitted\n"
    assert git(repo, "merge-base", "--is-ancestor", main_before, "main") == ""
    parents = git(repo, "rev-list", "--parents", "-1", "main").split()[1:]
    if strategy == "merge":
        assert parents == [main_before, git(repo, "rev-parse", merged["branch"])]
    elif strategy == "squash":
        assert parents == [main_before]
    else:
        assert merges_on(repo) == 0
        assert len(git(repo, "rev-list", f"{main_before}..main").split()) == 2
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["merge"]["commit"] == head
    assert record["merge"]["into"] == "main"
    assert record["merge"]["strategy"] == strategy
    (event,) = _events(host, task, "task.merged")
    assert event["commit"] == head
    assert event["into"] == "main"
    assert event["branch"] == record["branch"]
    notice = merged["notice"]
    assert notice is not None
    assert str(repo) in notice
    # what the line says to run brings the person's files up, their own work kept
    command = notice.split("`")[1]
    subprocess.run(command, shell=True, check=True, capture_output=True)
    assert (repo / "feature.txt").read_text() == "one\n"
    assert (repo / "notes.txt").read_text() == "mine, edited and not committed\n"
    assert (repo / "scratch.txt").read_text() == "untracked\n"
    assert git(repo, "diff", "--cached", "--name-only") == ""


def test_issue_40_item_1_a_commit_landing_on_the_base_between_read_and_swap_is_kept(
    host: Host, tmp_path: Path
) -> None:
    """laneway reads main, computes the merge; someone's commit lands on main before the swap:
    the swap fails, the merge is computed again on top of it, and both are on main."""
    repo = person_repo(tmp_path)
    wf = board_with_repo(host, tmp_path, repo)
    task, _ = task_with_work(host, wf, {"feature.txt": "one\n"}, commit=True)
    pause = faults.pause_at("merge.after_commit")
    result: dict[str, object] = {}

    def merge() -> None:
        result.update(host.changes.merge(task))

    worker = threading.Thread(target=merge)
    worker.start()
    try:
        assert pause.reached.wait(30)
        theirs = commit_on(repo, "main", "theirs.txt", "someone else's\n", "pushed meanwhile")
    finally:
        pause.release()
    worker.join(30)
    assert result["commit"] == git(repo, "rev-parse", "main")
    assert git(repo, "merge-base", "--is-ancestor", theirs, "main") == ""
    assert show(repo, "main:theirs.txt") == "someone else's\n"
    assert show(repo, "main:feature.txt") == "one\n"
    assert merges_on(repo) == 1


@pytest.mark.parametrize("strategy", ["merge", "squash", "rebase"])
def test_issue_40_item_1_a_conflict_changes_nothing_and_names_every_path(
    host: Host, tmp_path: Path, strategy: str
) -> None:
    repo = person_repo(tmp_path)
    wf = board_with_repo(host, tmp_path, repo)
    task, path = task_with_work(
        host, wf, {"README.md": "agent's\n", "src/app.py": "print('agent')\n"}, commit=True
    )
    commit_on(repo, "main", "README.md", "person's\n", "readme")
    commit_on(repo, "main", "src/app.py", "print('person')\n", "app")
    main_before = git(repo, "rev-parse", "main")
    branch_before = git(path, "rev-parse", "HEAD")
    state = checkout_state(repo)

    with pytest.raises(gitmerge.MergeConflict) as caught:
        host.changes.merge(task, strategy=strategy)

    assert set(caught.value.paths) == {"README.md", "src/app.py"}
    assert "README.md" in str(caught.value)
    assert "src/app.py" in str(caught.value)
    assert git(repo, "rev-parse", "main") == main_before
    assert git(path, "rev-parse", "HEAD") == branch_before
    assert checkout_state(repo) == state
    assert [w for w in git(repo, "worktree", "list").splitlines() if "rebase" in w] == []
    record = host.tasks.get(task).workspace
    assert record is not None
    assert "merge" not in record
    assert set(record["conflict"]["paths"]) == {"README.md", "src/app.py"}
    assert _events(host, task, "task.merged") == []


def test_issue_40_item_1_a_branch_that_merged_its_base_in_is_told_to_rebase_for_the_rebase_strategy(
    host: Host, tmp_path: Path
) -> None:
    """An agent told of a conflict may merge the base into its branch. That lands by merge or
    squash; the rebase strategy replays only the branch's own commits, so it still conflicts:
    the refusal and the agent's next prompt then say to rebase, not merge (told "merge main",
    the agent would find nothing left to merge and conflict for good). Rebased, it lands."""
    from core.agents.feedback import Feedback, block

    repo = person_repo(tmp_path)
    wf = board_with_repo(host, tmp_path, repo)
    task, path = task_with_work(host, wf, {"README.md": "agent's\n"}, commit=True)
    commit_on(repo, "main", "README.md", "person's\n", "readme")
    agent = ("-c", "user.name=agent", "-c", "user.email=a@x")
    merging = subprocess.run(
        ["git", *agent, "merge", "-q", "main"], cwd=path, capture_output=True, check=False
    )
    assert merging.returncode != 0  # README.md conflicts
    (path / "README.md").write_text("person's and agent's\n")
    git(path, "add", "README.md")
    git(path, *agent, "commit", "-q", "--no-edit")
    main_before = git(repo, "rev-parse", "main")

    with pytest.raises(gitmerge.MergeConflict) as caught:
        host.changes.merge(task, strategy="rebase")
    said = str(caught.value)
    assert caught.value.paths == ("README.md",)
    assert "does not rebase onto main" in said
    assert "it merged main in" in said
    assert "rebase it onto main instead" in said
    assert git(repo, "rev-parse", "main") == main_before
    record = host.tasks.get(task).workspace
    assert record is not None
    told = block(Feedback("", (), (), record["conflict"]), {})
    assert "`git rebase main`" in told
    assert "`git merge main`" not in told
    assert "`git merge main`" in block(
        Feedback("", (), (), {**record["conflict"], "strategy": "squash"}), {}
    )

    # rebased by the agent (its commit now on top of main): the rebase strategy lands it
    git(path, "reset", "-q", "--hard", "main")
    (path / "README.md").write_text("person's and agent's\n")
    git(path, *agent, "commit", "-q", "-am", "work, on main")
    landed = host.changes.merge(task, strategy="rebase")
    assert show(repo, "main:README.md") == "person's and agent's\n"
    assert landed["commit"] == git(repo, "rev-parse", "main")
    assert git(repo, "rev-parse", "main^") == main_before


def test_issue_40_item_1_merging_twice_is_already_done_and_bad_input_is_one_line(
    host: Host, tmp_path: Path
) -> None:
    repo = person_repo(tmp_path)
    wf = board_with_repo(host, tmp_path, repo)
    task, _ = task_with_work(host, wf, {"feature.txt": "one\n"})
    first = host.changes.merge(task, strategy="squash")
    again = host.changes.merge(task, strategy="squash")
    assert again["already"] is True
    assert again["commit"] == first["commit"] == git(repo, "rev-parse", "main")

    bare = host.tasks.create(workflow=wf, title="never ran").id
    with pytest.raises(LanewayError, match="has no worktree"):
        host.changes.merge(bare)
    with pytest.raises(LanewayError, match="strategy 'octopus'"):
        host.changes.merge(task, strategy="octopus")
    with pytest.raises(LanewayError, match="no branch 'nope'"):
        host.changes.merge(task, into="nope")
