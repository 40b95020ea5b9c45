"""Issue 40 through real processes: `kill -9`-style exits at each new fault point then
`laneway recover` (exactly one merge, exactly one push), two processes merging two tasks into
one base at once, `task merge` / `task push` / `workflow set --remote` on the command line and
`POST /api/tasks/{t}/merge|push` over HTTP, and bad input as one line each. Real git
repositories made here; both databases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.store import tables as t
from tests.agents.changes_kit import (
    commit_on,
    merges_on,
    person_repo,
    show,
    task_with_work,
    trailers_on,
)
from tests.agents.conftest import enqueue, laneway
from tests.agents.test_issue_40_kinds import landing
from tests.agents.test_worktrees import git
from tests.conftest import open_host, wait_for_dead_processes

pytestmark = pytest.mark.slow


def lw(url: str, *args: str, env: dict[str, str], cwd: Path) -> Any:
    done = laneway("--db", url, "--json", *args, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in done.stderr
    return lines[0]


def markers(url: str, task: str, env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    entries = lw(url, "entries", "list", "--task", task, env=env, cwd=cwd)
    return [{**m, "entry_id": e["id"]} for e in entries for m in e["markers"]]


def bare_remote(tmp_path: Path, repo: Path) -> Path:
    """A bare repository the person's repository knows as `origin`, logging every update of
    its branches (so a test counts the pushes that landed)."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(remote, "config", "core.logAllRefUpdates", "always")
    git(repo, "remote", "add", "origin", str(remote))
    return remote


def pushes(remote: Path, branch: str) -> int:
    done = subprocess.run(
        ["git", "-C", str(remote), "reflog", "show", "--format=%H", f"refs/heads/{branch}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return len(done.stdout.split()) if done.returncode == 0 else 0


MERGE_POINTS = ("merge.after_commit", "merge.after_ref", "merge.before_marker")


@pytest.mark.parametrize("strategy", ["merge", "squash", "rebase"])
@pytest.mark.parametrize("point", MERGE_POINTS)
def test_issue_40_item_2_killed_at_each_merge_point_then_recover_merges_exactly_once(
    db_url: str, tmp_path: Path, point: str, strategy: str
) -> None:
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    repo = person_repo(tmp_path)
    with open_host(db_url) as host:
        wf = landing(host, tmp_path, repo, f"{{strategy: {strategy}}}")
        task, _ = task_with_work(host, wf, {"feature.txt": "one\n"}, commit=True)
    main_before = git(repo, "rev-parse", "main")

    crashed = laneway(
        "--db",
        db_url,
        "task",
        "move",
        task,
        "Merge",
        cwd=tmp_path,
        env={**env, "LANEWAY_FAULT": point},
    )
    assert crashed.returncode == 99, crashed.stderr
    wait_for_dead_processes(db_url)
    moved = git(repo, "rev-parse", "main") != main_before
    assert moved == (point != "merge.after_commit")
    (left,) = markers(db_url, task, env, tmp_path)
    assert left["state"] == "in_progress"

    report = lw(db_url, "recover", env=env, cwd=tmp_path)
    assert report["redispatched"] >= 1
    (marker,) = markers(db_url, task, env, tmp_path)
    assert marker["state"] == "done", marker
    assert show(repo, "main:feature.txt") == "one\n"
    if strategy == "merge":
        assert merges_on(repo) == 1
    else:
        assert trailers_on(repo, marker["entry_id"]) == 1
        assert merges_on(repo) == 0
    landed = git(repo, "rev-list", f"{main_before}..main").split()
    assert len(landed) == (2 if strategy == "merge" else 1)
    shown = lw(db_url, "task", "show", task, env=env, cwd=tmp_path)
    assert shown["workspace"]["merge"]["commit"] == git(repo, "rev-parse", "main")


@pytest.mark.parametrize("point", ["push.after_push", "push.before_marker"])
def test_issue_40_item_3_killed_at_each_push_point_then_recover_pushes_exactly_once(
    db_url: str, tmp_path: Path, point: str
) -> None:
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    repo = person_repo(tmp_path)
    remote = bare_remote(tmp_path, repo)
    path = tmp_path / "pushing.yml"
    path.write_text(
        "id: pushing\nname: Pushing\nsteps:\n"
        "  - {id: work, name: Work, position: 0, is_start_step: true, allow_manual_move: true}\n"
        "  - id: ship\n    name: Ship\n    position: 1\n    allow_manual_move: true\n"
        "    events:\n      on_enter:\n        - type: push_branch\n"
    )
    with open_host(db_url) as host:
        (wf,) = host.workflows.import_file(path)
        host.workflows.set_repository(wf.id, str(repo), None)
        host.workflows.set_remote(wf.id, "origin")
        task, _ = task_with_work(host, wf.id, {"feature.txt": "one\n"})
        branch = f"laneway/{task[-8:]}"

    crashed = laneway(
        "--db",
        db_url,
        "task",
        "move",
        task,
        "Ship",
        cwd=tmp_path,
        env={**env, "LANEWAY_FAULT": point},
    )
    assert crashed.returncode == 99, crashed.stderr
    wait_for_dead_processes(db_url)
    assert pushes(remote, branch) == 1
    lw(db_url, "recover", env=env, cwd=tmp_path)
    (marker,) = markers(db_url, task, env, tmp_path)
    assert marker["state"] == "done", marker
    assert pushes(remote, branch) == 1
    assert git(remote, "rev-parse", branch) == git(repo, "rev-parse", branch)
    shown = lw(db_url, "task", "show", task, env=env, cwd=tmp_path)
    assert shown["workspace"]["push"]["commit"] == git(repo, "rev-parse", branch)


@pytest.mark.one_database
def test_issue_40_item_3_task_push_on_the_command_line(db_url: str, tmp_path: Path) -> None:
    """`workflow set --remote`, `task push`: the exact commit lands; a repeated push is a
    no-op; new work is pushed over laneway's own push; someone else's push is refused in one
    line and left; a remote that refuses is one line; `--remote ''` clears it."""
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    repo = person_repo(tmp_path)
    remote = bare_remote(tmp_path, repo)
    with open_host(db_url) as host:
        wf = landing(host, tmp_path, repo, "{}")
        task, path = task_with_work(host, wf, {"feature.txt": "one\n"})
    branch = f"laneway/{task[-8:]}"
    no_remote = laneway("--db", db_url, "task", "push", task, cwd=tmp_path, env=env)
    assert "has no remote" in one_line_error(no_remote)
    unknown = laneway(
        "--db", db_url, "workflow", "set", wf, "--remote", "upstream", cwd=tmp_path, env=env
    )
    assert "has no such remote" in one_line_error(unknown)
    shown = lw(db_url, "workflow", "set", wf, "--remote", "origin", env=env, cwd=tmp_path)
    assert shown["remote"] == "origin"

    pushed = lw(db_url, "task", "push", task, env=env, cwd=tmp_path)
    assert pushed["remote"] == "origin"
    assert pushed["branch"] == branch
    assert pushed["commit"] == git(repo, "rev-parse", branch) == git(remote, "rev-parse", branch)
    assert show(remote, f"{branch}:feature.txt") == "one\n"
    again = lw(db_url, "task", "push", task, env=env, cwd=tmp_path)
    assert again["commit"] == pushed["commit"]
    assert pushes(remote, branch) == 1
    with open_host(db_url) as host, host.store.read() as conn:
        said = conn.execute(
            sa.select(t.board_events.c.id).where(
                t.board_events.c.task_id == task, t.board_events.c.type == "task.pushed"
            )
        ).all()
    assert len(said) == 1  # the repeated push did nothing, and says nothing

    (path / "more.txt").write_text("more\n")
    newer = lw(db_url, "task", "push", task, env=env, cwd=tmp_path)
    assert newer["commit"] != pushed["commit"]
    assert pushes(remote, branch) == 2

    # someone else pushes to the task's branch: laneway's next push is refused, theirs kept
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(remote), str(other))
    git(other, "checkout", "-q", branch)
    (other / "theirs.txt").write_text("theirs\n")
    git(other, "add", "-A")
    git(other, "-c", "user.name=o", "-c", "user.email=o@x", "commit", "-q", "-m", "theirs")
    git(other, "push", "-q", "origin", branch)
    theirs = git(other, "rev-parse", "HEAD")
    (path / "mine.txt").write_text("mine\n")
    refused = laneway("--db", db_url, "task", "push", task, cwd=tmp_path, env=env)
    line = one_line_error(refused)
    assert "someone else pushed to it" in line
    assert git(remote, "rev-parse", branch) == theirs

    # a remote that refuses every push
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes are closed' >&2\nexit 1\n")
    hook.chmod(0o755)
    other_task = ""
    with open_host(db_url) as host:
        other_task, _ = task_with_work(host, wf, {"x.txt": "x\n"}, title="second")
    closed = laneway("--db", db_url, "task", "push", other_task, cwd=tmp_path, env=env)
    assert "refused" in one_line_error(closed)

    cleared = lw(db_url, "workflow", "set", wf, "--remote", "", env=env, cwd=tmp_path)
    assert cleared["remote"] is None


@pytest.mark.one_database
def test_issue_40_item_1_task_merge_on_the_command_line_and_its_bad_input(
    db_url: str, tmp_path: Path
) -> None:
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    repo = person_repo(tmp_path)
    with open_host(db_url) as host:
        wf = landing(host, tmp_path, repo, "{}")
        task, _ = task_with_work(host, wf, {"README.md": "agent's\n", "src/app.py": "x\n"})
        clean, _ = task_with_work(host, wf, {"feature.txt": "one\n"}, title="clean")
        bare = host.tasks.create(workflow=wf, title="never ran").id
    commit_on(repo, "main", "README.md", "person's\n", "readme")
    commit_on(repo, "main", "src/app.py", "y\n", "app")
    before = git(repo, "rev-parse", "main")

    conflict = laneway("--db", db_url, "task", "merge", task, cwd=tmp_path, env=env)
    line = one_line_error(conflict)
    assert "conflicts in README.md, src/app.py" in line
    assert "nothing changed" in line
    as_json = laneway("--db", db_url, "--json", "task", "merge", task, cwd=tmp_path, env=env)
    assert as_json.returncode == 1
    error = json.loads(as_json.stderr.strip().splitlines()[-1])
    assert error["paths"] == ["README.md", "src/app.py"]
    assert error["code"] == "merge_conflict"
    assert git(repo, "rev-parse", "main") == before

    done = laneway(
        "--db", db_url, "task", "merge", clean, "--strategy", "squash", cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip().splitlines()
    assert said[0].startswith(f"committed what task {clean}'s worktree held uncommitted")
    assert said[1].startswith(f"merged laneway/{clean[-8:]} into main (squash): ")
    assert "read-tree -m -u" in said[2]
    assert show(repo, "main:feature.txt") == "one\n"
    shown = lw(db_url, "task", "show", clean, env=env, cwd=tmp_path)
    assert shown["workspace"]["merge"]["strategy"] == "squash"
    text = laneway("--db", db_url, "task", "show", clean, cwd=tmp_path, env=env).stdout
    assert f"branch: laneway/{clean[-8:]}" in text
    assert "base: main at " in text
    assert "merged into main (squash) as " in text

    no_worktree = laneway("--db", db_url, "task", "merge", bare, cwd=tmp_path, env=env)
    assert "has no worktree" in one_line_error(no_worktree)
    bad_strategy = laneway(
        "--db", db_url, "task", "merge", clean, "--strategy", "octopus", cwd=tmp_path, env=env
    )
    assert bad_strategy.returncode == 2
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    gone = laneway("--db", db_url, "task", "merge", clean, cwd=tmp_path, env=env)
    assert "is gone" in one_line_error(gone)


MERGER = """\
import json, sys, time
from pathlib import Path
from tests.conftest import open_host

url, task, go = sys.argv[1:4]
with open_host(url) as host:
    while not Path(go).exists():
        time.sleep(0.001)
    print(json.dumps(host.changes.merge(task)))
"""


def test_issue_40_item_1_two_processes_merging_two_tasks_into_one_base_both_land(
    db_url: str, tmp_path: Path
) -> None:
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    repo = person_repo(tmp_path)
    with open_host(db_url) as host:
        wf = landing(host, tmp_path, repo, "{}")
        first, _ = task_with_work(host, wf, {"a.txt": "a\n"}, title="a", commit=True)
        second, _ = task_with_work(host, wf, {"b.txt": "b\n"}, title="b", commit=True)
    go = tmp_path / "go"

    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MERGER, db_url, task, str(go)],
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for task in (first, second)
    ]
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for proc, (_out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
    assert show(repo, "main:a.txt") == "a\n"
    assert show(repo, "main:b.txt") == "b\n"
    assert merges_on(repo) == 2
    commits = {json.loads(out)["commit"] for out, _ in outs}
    head = git(repo, "rev-parse", "main")
    assert head in commits
    for commit in commits:
        assert git(repo, "merge-base", "--is-ancestor", commit, "main") == ""


def test_issue_40_http_merge_push_and_a_conflict_409_naming_the_paths(
    db_url: str, tmp_path: Path
) -> None:
    from tests.serve.conftest import start_serve

    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    repo = person_repo(tmp_path)
    remote = bare_remote(tmp_path, repo)
    with open_host(db_url) as host:
        wf = landing(host, tmp_path, repo, "{}")
        host.workflows.set_remote(wf, "origin")
        clean, _ = task_with_work(host, wf, {"feature.txt": "one\n"}, title="clean")
        clash, _ = task_with_work(host, wf, {"README.md": "agent's\n"}, title="clash")
    commit_on(repo, "main", "README.md", "person's\n", "readme")
    served = start_serve(db_url, tmp_path, env=env)
    try:
        with served.client() as client:
            pushed = client.post(f"/api/tasks/{clean}/push", json={})
            assert pushed.status_code == 200, pushed.text
            assert pushed.json()["commit"] == git(remote, "rev-parse", f"laneway/{clean[-8:]}")
            merged = client.post(f"/api/tasks/{clean}/merge", json={"strategy": "rebase"})
            assert merged.status_code == 200, merged.text
            assert merged.json()["commit"] == git(repo, "rev-parse", "main")
            assert merged.json()["strategy"] == "rebase"
            before = git(repo, "rev-parse", "main")
            refused = client.post(f"/api/tasks/{clash}/merge", json={})
            assert refused.status_code == 409
            assert refused.json()["paths"] == ["README.md"]
            assert "README.md" in refused.json()["error"]
            assert git(repo, "rev-parse", "main") == before
            wrong = client.post(f"/api/tasks/{clash}/merge", json={"strategy": 3})
            assert wrong.status_code == 400
    finally:
        served.stop()


def test_issue_40_item_4_line_comments_through_cli_and_http_reach_the_next_prompt(
    db_url: str, tmp_path: Path
) -> None:
    from tests.serve.conftest import start_serve

    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    prompts = tmp_path / "prompts.txt"
    repo = person_repo(tmp_path)
    with open_host(db_url) as host:
        wf = landing(host, tmp_path, repo, "{}")
        task, _ = task_with_work(host, wf, {"feature.txt": "one\ntwo\n"})
        keeper = (
            "import sys\nprompt = sys.stdin.read()\n"
            f"open({str(prompts)!r}, 'a').write(prompt + '\\n=====\\n')\n"
        )
        agent = host.profiles.add("coder", command=[sys.executable, "-c", keeper]).id
        enqueue(host, agent, task)
    assert laneway("--db", db_url, "worker", "--once", cwd=tmp_path, env=env).returncode == 0

    added = lw(
        db_url, "task", "comment", task, "rename it", "--file", "feature.txt", "--line", "1",
        "--author", "carol", env=env, cwd=tmp_path,
    )  # fmt: skip
    assert (added["file"], added["line"]) == ("feature.txt", 1)
    half = laneway(
        "--db", db_url, "task", "comment", task, "x", "--line", "3", cwd=tmp_path, env=env
    )
    assert "needs both" in one_line_error(half)
    served = start_serve(db_url, tmp_path, env=env)
    try:
        with served.client() as client:
            posted = client.post(
                f"/api/tasks/{task}/comments",
                json={"body": "and test it", "author": "dave", "file": "feature.txt", "line": 2},
            )
            assert posted.status_code == 201, posted.text
            assert (posted.json()["file"], posted.json()["line"]) == ("feature.txt", 2)
            bad = client.post(
                f"/api/tasks/{task}/comments", json={"body": "x", "file": "a", "line": "2"}
            )
            assert bad.status_code == 400
    finally:
        served.stop()
    with open_host(db_url) as host:
        enqueue(host, agent, task)
    assert laneway("--db", db_url, "worker", "--once", cwd=tmp_path, env=env).returncode == 0
    second = prompts.read_text().split("=====")[1]
    assert "- feature.txt:1: rename it (carol)" in second
    assert "- feature.txt:2: and test it (dave)" in second
