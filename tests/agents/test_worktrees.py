"""Where agents work (issue 23): a git worktree per task, its diff, nothing lost when it ends.

CLI.md `workflow set --repository/--base-branch`, `task create --repository`, `task diff` and
the task's `workspace`, driven through the host's services and the in-process worker, with
real git repositories made here and exec agents that are real subprocesses, on both databases.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.agents import worker
from core.agents.values import TurnOutcome
from core.errors import LanewayError
from core.host import Host
from core.store import tables as t
from tests.agents.conftest import enqueue, plain_workflow, python_agent
from tests.conftest import eventually


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A repository on `main` with one commit of `files`."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.com")
    for name, text in (files or {"README.md": "hello\nworld\n"}).items():
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "start")
    return path


@pytest.fixture
def worktrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "worktrees"
    monkeypatch.setenv("LANEWAY_WORKTREES", str(where))
    return where


def writer_agent(name: str, text: str) -> list[str]:
    """An exec agent that writes `name` in its working directory and says where it ran."""
    code = (
        "import os, sys; sys.stdin.read()\n"
        f"open({name!r}, 'w').write({text!r})\n"
        "print('cwd ' + os.getcwd())\n"
    )
    return python_agent(code)


def run_turn(host: Host, agent: str, task: str) -> dict[str, Any]:
    enqueue(host, agent, task)
    summary = worker.work(host, once=True)
    return summary.as_dict()


def failed_turn(host: Host, agent: str, task: str) -> TurnOutcome:
    """Run one turn expected to fail; its outcome, checked against the run's own row."""
    run_id = enqueue(host, agent, task)
    claimed = worker.claim_next(host)
    assert claimed is not None
    assert claimed.id == run_id
    outcome = worker.execute(host, claimed)
    assert not outcome.ok
    with host.store.read() as conn:
        stored = conn.execute(
            sa.select(t.runs.c.status, t.runs.c.error_message).where(t.runs.c.id == run_id)
        ).one()
    assert tuple(stored) == ("failed", outcome.error)
    return outcome


def board(host: Host, tmp_path: Path, repo: Path, **options: Any) -> str:
    wf = plain_workflow(host, tmp_path)
    host.workflows.set_repository(wf, str(repo), options.get("base_branch"))
    return wf


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_two_tasks_get_two_worktrees_on_two_branches_and_the_checkout_is_untouched(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """Issue 23, what to build 1 and its first test: two tasks, two worktrees, two branches."""
    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    first, second = (host.tasks.create(workflow=wf, title=f"card {i}").id for i in range(2))
    agent = host.profiles.add("writer", command=writer_agent("out.txt", "mine\n")).id
    assert run_turn(host, agent, first)["finished"] == 1
    assert run_turn(host, agent, second)["finished"] == 1

    records = [host.tasks.get(task).workspace for task in (first, second)]
    assert all(r is not None for r in records)
    paths = {Path(r["path"]) for r in records if r is not None}
    branches = {r["branch"] for r in records if r is not None}
    assert paths == {worktrees / first, worktrees / second}
    assert branches == {f"laneway/{first[-8:]}", f"laneway/{second[-8:]}"}
    for record in records:
        assert record is not None
        assert record["repository"] == str(repo.resolve())
        assert record["base_branch"] == "main"
        assert record["base_commit"] == git(repo, "rev-parse", "main")
        assert (Path(record["path"]) / "out.txt").read_text() == "mine\n"
        assert git(Path(record["path"]), "branch", "--show-current") == record["branch"]
    # the main checkout: no file written, nothing changed, still on main
    assert not (repo / "out.txt").exists()
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "branch", "--show-current") == "main"


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_an_exec_agent_works_in_its_task_worktree_and_task_diff_shows_its_change(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """CLI.md `task diff`: an added file with its counts, and the patch (untracked included)."""
    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("writer", command=writer_agent("new.txt", "a\nb\nc\n")).id
    assert run_turn(host, agent, task)["finished"] == 1
    (session,) = host.sessions.list(task=task)
    said = [i.text for i in host.sessions.items(session.id, limit=100) if i.kind == "output"]
    assert f"cwd {worktrees / task}" in said

    from core.services import worktrees as service

    found = service.diff(host, task)
    assert found["task_id"] == task
    assert found["branch"] == f"laneway/{task[-8:]}"
    assert found["base"] == git(repo, "rev-parse", "main")
    assert found["files"] == [
        {"path": "new.txt", "status": "added", "additions": 3, "deletions": 0}
    ]
    assert "+++ b/new.txt" in found["patch"]
    assert "+a\n+b\n+c\n" in found["patch"]
    assert found["truncated"] is False


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_task_diff_includes_commits_modifications_and_deletions_against_the_base(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """The worktree against its base commit: committed, staged, unstaged and untracked."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "1\n2\n", "b.txt": "gone\n", "c.txt": "x\n"})
    wf = board(host, tmp_path, repo)
    task = host.tasks.create(workflow=wf, title="card").id
    code = (
        "import os, subprocess, sys; sys.stdin.read()\n"
        "open('c.txt', 'w').write('y\\n')\n"
        "who = ['-c', 'user.name=a', '-c', 'user.email=a@b']\n"
        "subprocess.run(['git', *who, 'commit', '-qam', 'c'], check=True)\n"
        "open('a.txt', 'a').write('3\\n')\n"
        "os.remove('b.txt')\n"
        "open('d.txt', 'w').write('new\\n')\n"
    )
    agent = host.profiles.add("editor", command=python_agent(code)).id
    assert run_turn(host, agent, task)["finished"] == 1
    from core.services import worktrees as service

    files = {f["path"]: f for f in service.diff(host, task)["files"]}
    assert files == {
        "a.txt": {"path": "a.txt", "status": "modified", "additions": 1, "deletions": 0},
        "b.txt": {"path": "b.txt", "status": "deleted", "additions": 0, "deletions": 1},
        "c.txt": {"path": "c.txt", "status": "modified", "additions": 1, "deletions": 1},
        "d.txt": {"path": "d.txt", "status": "added", "additions": 1, "deletions": 0},
    }
    # reading the diff staged nothing in the worktree's own index
    assert git(worktrees / task, "diff", "--cached", "--name-only") == ""


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_every_later_turn_works_in_the_same_worktree(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """Every later run of the task works in it, whichever agent runs it."""
    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    task = host.tasks.create(workflow=wf, title="card").id
    one = host.profiles.add("one", command=writer_agent("one.txt", "1\n")).id
    two = host.profiles.add("two", command=writer_agent("two.txt", "2\n")).id
    assert run_turn(host, one, task)["finished"] == 1
    record = host.tasks.get(task).workspace
    assert run_turn(host, two, task)["finished"] == 1
    assert host.tasks.get(task).workspace == record
    assert sorted(p.name for p in (worktrees / task).iterdir() if p.name != ".git") == [
        "README.md",
        "one.txt",
        "two.txt",
    ]
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 2


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_task_names_its_own_repository_and_base_branch(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """`task create --repository`: over the workflow's (here: none), from the branch named."""
    repo = make_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "dev")
    (repo / "dev.txt").write_text("dev\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "dev")
    git(repo, "checkout", "-q", "main")
    wf = plain_workflow(host, tmp_path)
    task = host.tasks.create(workflow=wf, title="card", repository=str(repo), base_branch="dev")
    assert task.repository == str(repo.resolve())
    assert task.base_branch == "dev"
    assert task.workspace is None
    agent = host.profiles.add("writer", command=writer_agent("x.txt", "x\n")).id
    assert run_turn(host, agent, task.id)["finished"] == 1
    record = host.tasks.get(task.id).workspace
    assert record is not None
    assert record["base_commit"] == git(repo, "rev-parse", "dev")
    assert (worktrees / task.id / "dev.txt").exists()


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_without_a_repository_an_agent_works_where_the_worker_runs(
    host: Host, tmp_path: Path, worktrees: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wf = plain_workflow(host, tmp_path)
    task = host.tasks.create(workflow=wf, title="card").id
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    agent = host.profiles.add("writer", command=writer_agent("x.txt", "x\n")).id
    assert run_turn(host, agent, task)["finished"] == 1
    assert (here / "x.txt").exists()
    assert host.tasks.get(task).workspace is None
    assert not worktrees.exists()


@pytest.mark.slow  # it starts a process: the subprocess tier
@pytest.mark.parametrize(
    ("repository", "branch", "message"),
    [
        ("{tmp}/nowhere", None, "repository {tmp}/nowhere: no such directory"),
        ("{tmp}/plain", None, "repository {tmp}/plain: not a git repository"),
        ("{tmp}/repo", "nope", "repository {tmp}/repo has no branch 'nope'"),
    ],
)
def test_a_bad_repository_or_branch_is_refused_when_named(
    host: Host, tmp_path: Path, repository: str, branch: str | None, message: str
) -> None:
    """A bad repository path or branch: one line naming it, at `workflow set` and at
    `task create`; nothing stored."""
    make_repo(tmp_path / "repo")
    (tmp_path / "plain").mkdir()
    wf = plain_workflow(host, tmp_path)
    path = repository.format(tmp=tmp_path)
    expected = message.format(tmp=tmp_path)
    with pytest.raises(LanewayError) as refused:
        host.workflows.set_repository(wf, path, branch)
    assert str(refused.value) == expected
    assert host.workflows.get(wf).repository is None
    with pytest.raises(LanewayError) as refused:
        host.tasks.create(workflow=wf, title="card", repository=path, base_branch=branch)
    assert str(refused.value) == expected
    assert host.tasks.list(workflow=wf) == []


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_repository_removed_under_a_task_fails_its_turn_with_one_line(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """A task whose repository has gone gets one clear error on its run (R2), no traceback."""
    import shutil

    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("writer", command=writer_agent("x.txt", "x\n")).id
    shutil.rmtree(repo)
    outcome = failed_turn(host, agent, task)
    assert (outcome.route, outcome.error) == ("R2", f"repository {repo}: no such directory")
    # and gone after the task's worktree was made
    make_repo(repo)
    assert run_turn(host, agent, task)["finished"] == 1
    shutil.rmtree(repo)
    outcome = failed_turn(host, agent, task)
    assert (outcome.route, outcome.error) == ("R2", f"task {task}: repository {repo} is gone")


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_archive_commits_what_was_left_to_the_branch_and_removes_the_worktree(
    host: Host, tmp_path: Path, worktrees: Path, laneway_logs: list[dict[str, Any]]
) -> None:
    """Nothing lost: the uncommitted work is on the task's branch, in a commit by laneway."""
    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("writer", command=writer_agent("work.txt", "precious\n")).id
    assert run_turn(host, agent, task)["finished"] == 1
    branch = f"laneway/{task[-8:]}"
    archived = host.tasks.archive(task)
    assert not (worktrees / task).exists()
    assert git(repo, "show", f"{branch}:work.txt") == "precious"
    assert git(repo, "log", "-1", "--format=%an: %s", branch) == (
        f"laneway: laneway: work left uncommitted in task {task} when it was archived"
    )
    assert str(worktrees / task) not in git(repo, "worktree", "list")
    assert archived.workspace is not None
    assert archived.workspace["removed_at"]
    # the diff still reads, from the branch
    from core.services import worktrees as service

    assert [f["path"] for f in service.diff(host, task)["files"]] == ["work.txt"]
    retired = [
        r for r in laneway_logs if r["extra"].get("task_id") == task and "branch" in r["extra"]
    ]
    assert any(r["extra"].get("commit") for r in retired)


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_delete_keeps_the_work_on_the_branch(host: Host, tmp_path: Path, worktrees: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("writer", command=writer_agent("work.txt", "kept\n")).id
    assert run_turn(host, agent, task)["finished"] == 1
    host.tasks.delete(task)
    assert not (worktrees / task).exists()
    assert git(repo, "show", f"laneway/{task[-8:]}:work.txt") == "kept"


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_worktree_on_another_host_is_not_made_again_here(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """Many machines (docs/operations.md): a worker elsewhere does not claim the task's run
    (issue 43 item 1: it stays queued, nothing fails), and a turn that reaches the worktree
    anyway is refused, naming the host."""
    from core.services import worktrees as places

    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("writer", command=writer_agent("x.txt", "x\n")).id
    assert run_turn(host, agent, task)["finished"] == 1
    record = dict(host.tasks.get(task).workspace or {})
    record["host"] = "elsewhere"
    with host.store.transaction() as uow:
        uow.conn.execute(
            sa.update(t.tasks).where(t.tasks.c.id == task).values(workspace=json.dumps(record))
        )
    run_id = enqueue(host, agent, task)
    assert worker.claim_next(host) is None
    assert host.runs.waits_for_host(host.runs.list(status="queued")) == {run_id: "elsewhere"}
    with pytest.raises(LanewayError) as refused:
        places.workspace_for(host, task)
    assert str(refused.value) == (
        f"task {task}'s worktree {worktrees / task} is on host 'elsewhere'; "
        "a worker there runs its turns"
    )


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_worktree_its_agent_moved_to_another_branch_is_kept_as_it_is(
    host: Host, tmp_path: Path, worktrees: Path
) -> None:
    """Nothing lost: the next turn finds the worktree sound on the agent's branch and works in
    it; nothing is made again over it."""
    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    task = host.tasks.create(workflow=wf, title="card").id
    code = (
        "import subprocess, sys; sys.stdin.read()\n"
        "subprocess.run(['git', 'checkout', '-q', '-b', 'mine'], check=True)\n"
        "open('kept.txt', 'w').write('kept\\n')\n"
    )
    mover = host.profiles.add("mover", command=python_agent(code)).id
    assert run_turn(host, mover, task)["finished"] == 1
    other = host.profiles.add("other", command=writer_agent("more.txt", "more\n")).id
    assert run_turn(host, other, task)["finished"] == 1
    path = worktrees / task
    assert (path / "kept.txt").read_text() == "kept\n"
    assert (path / "more.txt").read_text() == "more\n"
    assert git(path, "branch", "--show-current") == "mine"


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_worktree_killed_before_git_wrote_its_dot_git_is_made_again(tmp_path: Path) -> None:
    """The crashed shape `kill -9` leaves when it lands early in `git worktree add`: the path
    registered and locked `initializing`, a few files in it and no `.git` yet (remove refuses
    such a path, prune keeps a locked registration). The next worker makes it sound."""
    from core import gitwork

    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n"})
    path = tmp_path / "wt" / "card"
    admin = repo / ".git" / "worktrees" / "card"
    admin.mkdir(parents=True)
    (admin / "locked").write_text("initializing\n")
    (admin / "gitdir").write_text(f"{path}/.git\n")
    path.mkdir(parents=True)
    (path / "a.txt").write_text("a\n")
    base = git(repo, "rev-parse", "main")

    assert gitwork.ensure_worktree(repo, path, "laneway/card", base) is True
    assert (path / "b.txt").read_text() == "b\n"
    assert git(path, "status", "--porcelain") == ""
    listed = git(repo, "worktree", "list", "--porcelain")
    assert "locked" not in listed
    assert "prunable" not in listed
    assert listed.count("worktree ") == 2


@pytest.mark.slow  # it starts processes (git): the subprocess tier
def test_a_diff_read_while_the_agent_writes_files_atomically_is_the_worktrees(
    tmp_path: Path,
) -> None:
    """The page reads a task's diff while its agent works: an agent that writes each file to
    a temporary name and renames it into place (as Claude Code does) makes that name vanish
    between git's scan and its stat, which failed `git add` and answered the page 400 (CI, the
    real Claude page test). Every diff read meanwhile is the worktree's."""
    import threading

    from core import gitwork

    repo = make_repo(tmp_path / "repo")
    checkout = tmp_path / "worktree"
    git(repo, "worktree", "add", "-q", str(checkout))
    base = git(checkout, "rev-parse", "HEAD")
    done = threading.Event()
    written = [0]

    def agent() -> None:
        while not done.is_set():
            temporary = checkout / f"hello.txt.tmp.{written[0]}"
            temporary.write_text(f"hello {written[0]}\n" * 200)
            temporary.replace(checkout / "hello.txt")
            written[0] += 1

    writer = threading.Thread(target=agent)
    writer.start()
    try:
        # reads begin once the file has been renamed into place a first time (before that the
        # worktree holds only the first temporary: what a diff then shows, rightly; CI run 46)
        eventually(lambda: (checkout / "hello.txt").exists(), timeout=30, every=0.001)
        diffs = [gitwork.diff(repo, checkout, base) for _ in range(60)]
    finally:
        done.set()
        writer.join()
    assert written[0] > 60  # the agent wrote all along
    for found in diffs:  # the file, and at times a temporary caught before its rename
        paths = [f.path for f in found.files]
        assert "hello.txt" in paths
        assert all(p.startswith("hello.txt.tmp.") for p in paths if p != "hello.txt")
