"""Issue 23 item 3: a task reaching its workflow's terminal step retires its worktree when the
workflow says so (`workflow set --retire-worktrees`), as archiving does: what the agent left
uncommitted is committed to the task's branch by laneway, the checkout is removed, the branch
stays. Off by default (`--keep-worktrees`): the worktree stays. Real git repositories, exec
agents that are real subprocesses, both databases.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from core.cli import build_cli
from core.host import Host
from tests.agents.test_worktrees import board, git, make_repo, run_turn, worktrees, writer_agent

__all__ = ["worktrees"]  # the fixture, imported so pytest finds it here


def _worked_task(host: Host, tmp_path: Path, *, retire: bool | None) -> tuple[str, Path]:
    """A task whose agent wrote `left.txt` in its worktree and committed nothing."""
    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    if retire is not None:
        host.workflows.set_retire_worktrees(wf, retire)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("writer", command=writer_agent("left.txt", "unfinished\n")).id
    assert run_turn(host, agent, task)["finished"] == 1
    return task, repo


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_with_retire_worktrees_on_a_task_reaching_done_has_its_worktree_retired(
    host: Host, tmp_path: Path, worktrees: Path, laneway_logs: list[dict[str, Any]]
) -> None:
    """Issue 23 item 3, "its reaching a terminal step when the workflow says so"."""
    task, repo = _worked_task(host, tmp_path, retire=True)
    assert (worktrees / task / "left.txt").exists()
    host.tasks.move(task, "Doing")
    assert (worktrees / task).is_dir()  # only the terminal step retires it

    host.tasks.move(task, "Done")

    branch = f"laneway/{task[-8:]}"
    assert not (worktrees / task).exists()
    assert str(worktrees / task) not in git(repo, "worktree", "list")
    assert git(repo, "show", f"{branch}:left.txt") == "unfinished"
    assert git(repo, "log", "-1", "--format=%an: %s", branch) == (
        f"laneway: laneway: work left uncommitted in task {task} when it was done"
    )
    workspace = host.tasks.get(task).workspace
    assert workspace is not None
    assert workspace["removed_at"]
    assert git(repo, "status", "--porcelain") == ""
    assert any(r["extra"].get("task_id") == task and r["extra"].get("commit") for r in laneway_logs)


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_by_default_a_task_reaching_done_keeps_its_worktree(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """Issue 23 item 3: retiring at the terminal step is the workflow's choice, off unless set."""
    task, repo = _worked_task(host, tmp_path, retire=None)
    host.tasks.move(task, "Done")
    assert (worktrees / task / "left.txt").read_text() == "unfinished\n"
    workspace = host.tasks.get(task).workspace
    assert workspace is not None
    assert "removed_at" not in workspace
    assert git(repo, "log", "-1", "--format=%s", f"laneway/{task[-8:]}") == "start"


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_keep_worktrees_turns_it_off_again(host: Host, tmp_path: Path, worktrees: Path) -> None:
    """`--keep-worktrees` after `--retire-worktrees`: the worktree stays at Done."""
    task, _ = _worked_task(host, tmp_path, retire=True)
    wf = host.tasks.get(task).workflow_id
    assert wf is not None
    assert not host.workflows.set_retire_worktrees(wf, False).retire_worktrees
    host.tasks.move(task, "Done")
    assert (worktrees / task / "left.txt").exists()


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_cli_workflow_set_retire_and_keep_worktrees(
    db_url: str, host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLI `workflow set W --retire-worktrees/--keep-worktrees`, shown as `retire_worktrees`."""
    monkeypatch.delenv("LANEWAY_DB", raising=False)
    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    cli, runner = build_cli(plugin_commands=False), CliRunner()

    def workflow_set(*flags: str) -> dict[str, Any]:
        done = runner.invoke(cli, ["--db", db_url, "--json", "workflow", "set", wf, *flags])
        assert done.exit_code == 0, done.output
        shown: dict[str, Any] = json.loads(done.stdout)
        return shown

    shown = runner.invoke(cli, ["--db", db_url, "--json", "workflow", "show", wf])
    assert json.loads(shown.stdout)["retire_worktrees"] is False
    assert workflow_set("--retire-worktrees")["retire_worktrees"] is True
    assert host.workflows.get(wf).retire_worktrees
    assert workflow_set("--keep-worktrees")["retire_worktrees"] is False
    bare = runner.invoke(cli, ["--db", db_url, "workflow", "set", wf])
    assert bare.exit_code != 0
    assert "--retire-worktrees/--keep-worktrees" in bare.output


def _done_and_unmarked(host: Host, task: str) -> None:
    """The task moved to Done and its worktree retired (committed, removed), its record put
    back to before the retire's mark: the shape another process's retire leaves for a moment."""
    from core.store import tables as t

    host.tasks.move(task, "Done")
    workspace = host.tasks.get(task).workspace
    assert workspace is not None
    assert workspace["removed_at"]
    unmarked = {k: v for k, v in workspace.items() if k != "removed_at"}
    with host.store.transaction() as uow:
        uow.conn.execute(
            t.tasks.update().where(t.tasks.c.id == task).values(workspace=json.dumps(unmarked))
        )


@pytest.mark.slow  # it starts a process: the subprocess tier
@pytest.mark.one_database
def test_a_diff_read_while_a_retire_is_between_its_removal_and_its_mark_shows_the_branch(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """`task diff` (and the page's diff of a task that just reached Done) read while another
    process retires the worktree: the work is committed to the branch and the checkout removed,
    but the record is not yet marked. Put in that shape, the diff is the branch's, not an error
    (the page logged a 400 for it in CI)."""
    from core.services import worktrees as service

    task, _repo = _worked_task(host, tmp_path, retire=True)
    _done_and_unmarked(host, task)
    assert not (worktrees / task).exists()

    found = service.diff(host, task)

    assert [f["path"] for f in found["files"]] == ["left.txt"]
    assert found["branch"] == f"laneway/{task[-8:]}"

    # and read while the checkout is half removed (`git worktree remove` deletes its files
    # one by one, the worktree's `.git` among the first): the task has ended, the branch has it
    half = worktrees / task
    half.mkdir(parents=True)
    (half / "left.txt").write_text("a file not yet removed\n")
    found = service.diff(host, task)
    assert [f["path"] for f in found["files"]] == ["left.txt"]
    assert "a file not yet removed" not in found["patch"]


@pytest.mark.slow  # it starts a process: the subprocess tier
@pytest.mark.one_database
def test_a_diff_read_begun_before_the_task_reached_done_shows_the_branch(
    host: Host, tmp_path: Path, worktrees: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page asks for the diff of a card at its working step; while git reads the checkout,
    the worker moves the card to Done and starts retiring it (checkout half removed, record not
    yet marked). The diff had read the task before the move; it reads it again and shows the
    branch, not an error (the page with the real Claude adapter logged a 400 for it in CI)."""
    from core.services import worktrees as service

    task, _repo = _worked_task(host, tmp_path, retire=True)
    real = service.gitwork.diff

    def racing(repo: Path, path: Path, base: str) -> Any:
        _done_and_unmarked(host, task)
        path.mkdir(parents=True)  # half removed: a file left, its `.git` already gone
        (path / "left.txt").write_text("a file not yet removed\n")
        return real(repo, path, base)

    monkeypatch.setattr(service.gitwork, "diff", racing)
    found = service.diff(host, task)

    assert [f["path"] for f in found["files"]] == ["left.txt"]
    assert "a file not yet removed" not in found["patch"]
    assert found["branch"] == f"laneway/{task[-8:]}"
