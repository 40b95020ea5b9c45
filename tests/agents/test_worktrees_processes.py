"""Where agents work (issue 23), through real processes: the `laneway` command line, racing
workers, a worker killed mid-creation, an ACP agent's session cwd, and the HTTP diff route.
Real git repositories made here, both databases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import enqueue, laneway, plain_workflow
from tests.agents.test_worktrees import git, make_repo
from tests.conftest import open_host

pytestmark = pytest.mark.slow

FAKE = str(Path(__file__).resolve().with_name("fake_acp_agent.py"))

MAKE = textwrap.dedent(
    """\
    import json, sys, time
    from pathlib import Path
    from core.services.worktrees import workspace_for
    from tests.conftest import open_host

    url, task, go = sys.argv[1:4]
    with open_host(url) as host:
        while not Path(go).exists():
            time.sleep(0.001)
        print(json.dumps(str(workspace_for(host, task))))
    """
)


def maker(url: str, task: str, go: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """A process that makes `task`'s worktree as a worker's turn would, once `go` exists."""
    return subprocess.Popen(
        [sys.executable, "-c", MAKE, url, task, str(go)],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def registered(repo: Path) -> list[dict[str, str]]:
    """`git worktree list --porcelain`, one dict per worktree."""
    found = []
    for block in git(repo, "worktree", "list", "--porcelain").split("\n\n"):
        entry = {}
        for line in block.splitlines():
            key, _, value = line.partition(" ")
            entry[key] = value
        found.append(entry)
    return found


def lw(url: str, *args: str, env: dict[str, str], cwd: Path) -> Any:
    done = laneway("--db", url, "--json", *args, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.one_database
def test_cli_workflow_set_task_create_and_task_diff(db_url: str, tmp_path: Path) -> None:
    """CLI.md rows: `workflow set --repository --base-branch`, `task create --repository`
    (the task's `workspace`), `task diff`; a bad path is one line naming it, exit 1."""
    repo = make_repo(tmp_path / "repo")
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
    shown = lw(
        db_url,
        "workflow",
        "set",
        wf,
        "--repository",
        str(repo),
        "--base-branch",
        "main",
        env=env,
        cwd=tmp_path,
    )
    assert (shown["repository"], shown["base_branch"]) == (str(repo.resolve()), "main")

    bad = laneway(
        "--db",
        db_url,
        "workflow",
        "set",
        wf,
        "--repository",
        str(tmp_path / "no"),
        cwd=tmp_path,
        env=env,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        f"laneway: repository {tmp_path / 'no'}: no such directory"
    ]
    create = ("task", "create", "--workflow", wf, "--title", "x", "--repository", str(repo))
    bad = laneway("--db", db_url, *create, "--base-branch", "nope", cwd=tmp_path, env=env)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        f"laneway: repository {repo.resolve()} has no branch 'nope'"
    ]

    task = lw(db_url, "task", "create", "--workflow", wf, "--title", "card", env=env, cwd=tmp_path)
    assert task["workspace"] is None
    code = "import sys; sys.stdin.read(); open('hello.py', 'w').write('print(1)\\nprint(2)\\n')"
    with open_host(db_url) as host:
        agent = host.profiles.add("writer", command=[sys.executable, "-c", code]).id
    with open_host(db_url) as host:
        enqueue(host, agent, task["id"])
    done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    shown = lw(db_url, "task", "show", task["id"], env=env, cwd=tmp_path)
    assert shown["workspace"]["path"] == str(tmp_path / "wt" / task["id"])
    assert shown["workspace"]["branch"] == f"laneway/{task['id'][-8:]}"
    found = lw(db_url, "task", "diff", task["id"], env=env, cwd=tmp_path)
    assert set(found) >= {"task_id", "branch", "base", "files", "patch"}
    assert found["files"] == [
        {"path": "hello.py", "status": "added", "additions": 2, "deletions": 0}
    ]
    assert "+print(1)\n+print(2)\n" in found["patch"]
    lines = laneway("--db", db_url, "task", "diff", task["id"], "--stat", cwd=tmp_path, env=env)
    assert lines.stdout.splitlines() == ["added    +2 -0  hello.py"]
    # issue 40 item 7: plain `task diff` prints the patch as `git diff` does
    patch = laneway("--db", db_url, "task", "diff", task["id"], cwd=tmp_path, env=env)
    assert patch.stdout == found["patch"]
    assert patch.stdout.startswith("diff --git a/hello.py b/hello.py\n")


def test_workers_racing_to_make_one_tasks_worktree_end_with_one(
    db_url: str, tmp_path: Path
) -> None:
    """Two (here four) workers making one task's worktree at once: one worktree, one branch,
    one record; and four tasks of one repository made at once leave the repository sound."""
    repo = make_repo(tmp_path / "repo")
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.workflows.set_repository(wf, str(repo), None)
        one = host.tasks.create(workflow=wf, title="one").id
        many = [host.tasks.create(workflow=wf, title=f"t{i}").id for i in range(4)]
    go = tmp_path / "go"
    procs = [maker(db_url, one, go, env) for _ in range(4)]
    procs += [maker(db_url, task, go, env) for task in many]
    time.sleep(1.0)  # every process opened its host and waits
    go.touch()
    said = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        said.append(json.loads(out))
    assert said[:4] == [str(tmp_path / "wt" / one)] * 4
    assert said[4:] == [str(tmp_path / "wt" / task) for task in many]
    entries = registered(repo)
    assert len(entries) == 6
    assert [e for e in entries if e["worktree"] == str(tmp_path / "wt" / one)] == [
        {
            "worktree": str(tmp_path / "wt" / one),
            "HEAD": git(repo, "rev-parse", "main"),
            "branch": f"refs/heads/laneway/{one[-8:]}",
        }
    ]
    assert not any("locked" in e or "prunable" in e for e in entries)
    git(repo, "fsck", "--no-progress")
    with open_host(db_url, read_only=True) as host:
        record = host.tasks.get(one).workspace
    assert record is not None
    assert record["path"] == str(tmp_path / "wt" / one)


def test_a_worker_killed_mid_creation_then_a_new_one_makes_a_sound_worktree(
    db_url: str, tmp_path: Path
) -> None:
    """`kill -9` mid-creation (git's `locked: initializing` still there), then a new worker:
    the half-made worktree is made again; one worktree, every file checked out."""
    files = {f"f{i:05}.txt": f"{i}\n" for i in range(5000)}
    repo = make_repo(tmp_path / "repo", files)
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.workflows.set_repository(wf, str(repo), None)
        task = host.tasks.create(workflow=wf, title="card").id
    go = tmp_path / "go"
    go.touch()
    proc = maker(db_url, task, go, env)
    marker = repo / ".git" / "worktrees" / task / "locked"
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert marker.read_text().strip() == "initializing"  # it died mid-creation
    assert len(list((tmp_path / "wt" / task).rglob("f*.txt"))) < len(files)

    again = maker(db_url, task, go, env)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    path = Path(json.loads(out))
    assert path == tmp_path / "wt" / task
    assert len(list(path.glob("f*.txt"))) == len(files)
    assert git(path, "status", "--porcelain") == ""
    entries = registered(repo)
    assert len(entries) == 2
    assert not any("locked" in e or "prunable" in e for e in entries)


@pytest.mark.one_database
def test_an_acp_agents_session_cwd_is_its_tasks_worktree_and_its_files_are_confined_to_it(
    db_url: str, tmp_path: Path
) -> None:
    """The ACP session's cwd (and the agent process's) is the worktree; its file-system
    capability writes there, and not in the main checkout."""
    from tests.agents.test_acp_worker import Board, messages

    repo = make_repo(tmp_path / "repo")
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    outside = repo / "stolen.txt"
    script = {
        "turns": [
            [
                {"cwd": True},
                {"write": "acp.txt", "content": "from acp\n"},
                {"write": str(outside), "content": "no\n"},
            ]
        ]
    }
    b = Board(db_url, tmp_path, script)
    with open_host(db_url) as host:
        workflow = host.tasks.get(b.task_id).workflow_id
        assert workflow is not None
        host.workflows.set_repository(workflow, str(repo), None)
    b.work(env=env)
    _step, _session, items = b.read()
    where = tmp_path / "wt" / b.task_id
    said = messages(items)
    assert f"cwd: {where} (process: {where})" in said
    assert "wrote" in said
    assert "error -32602: path outside the session's working directory" in said
    assert not outside.exists()
    found = lw(db_url, "task", "diff", b.task_id, env=env, cwd=tmp_path)
    assert found["files"] == [
        {"path": "acp.txt", "status": "added", "additions": 1, "deletions": 0}
    ]


@pytest.mark.one_database
def test_the_http_diff_route_answers_as_task_diff(db_url: str, tmp_path: Path) -> None:
    """HTTP.md `GET /api/tasks/{t}/diff`: as `task diff`; a task without a worktree is 4xx."""
    from tests.serve.conftest import start_serve

    repo = make_repo(tmp_path / "repo")
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    code = "import sys; sys.stdin.read(); open('README.md', 'a').write('more\\n')"
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.workflows.set_repository(wf, str(repo), None)
        task = host.tasks.create(workflow=wf, title="card").id
        bare = host.tasks.create(workflow=wf, title="never run").id
        agent = host.profiles.add("writer", command=[sys.executable, "-c", code]).id
        enqueue(host, agent, task)
    done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    expected = lw(db_url, "task", "diff", task, env=env, cwd=tmp_path)
    assert expected["files"] == [
        {"path": "README.md", "status": "modified", "additions": 1, "deletions": 0}
    ]
    served = start_serve(db_url, tmp_path, env=env)
    try:
        with served.client() as client:
            got = client.get(f"/api/tasks/{task}/diff")
            assert got.status_code == 200
            assert got.json() == expected
            missing = client.get(f"/api/tasks/{bare}/diff")
            assert 400 <= missing.status_code < 500
            assert "has no worktree" in missing.text
    finally:
        served.stop()
