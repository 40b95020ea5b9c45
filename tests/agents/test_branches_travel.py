"""Issue 43 item 2 ("Branches travel through the remote"), and item 1's remote exception in the
claim's own statement.

Two "hosts" on one machine (`LANEWAY_HOST=alpha|beta`, each its own `LANEWAY_WORKTREES`), a
real git repository with a bare remote in tmp, real `laneway worker` processes and exec
agents that write and read files, on both databases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from core.host import Host
from tests.agents.conftest import enqueue, laneway, laneway_script, python_agent, script_env
from tests.agents.test_many_machines import cli, machine, status
from tests.agents.test_worktrees import board, git, make_repo

pytestmark = pytest.mark.slow  # real worker processes: the subprocess tier


def visiting_agent(log: Path, pause: Path | None = None) -> list[str]:
    """An exec agent that logs `<machine> saw <files in its cwd>`, then writes `<machine>-<n>.txt`
    (n: how many turns the log holds). With `pause`: it writes a part of its work first,
    touches `pause`, then sleeps (a worker can be killed mid-turn there)."""
    code = (
        "import os, sys, time; sys.stdin.read()\n"
        "me = os.environ.get('MACHINE', '?')\n"
        f"log = {str(log)!r}\n"
        "seen = sorted(p for p in os.listdir('.') if p.endswith('.txt'))\n"
        "n = len(open(log).read().splitlines()) if os.path.exists(log) else 0\n"
        "open(log, 'a').write(me + ' saw ' + ','.join(seen) + '\\n')\n"
    )
    if pause is not None:
        code += (
            "open('partial-' + me + '.txt', 'w').write('half')\n"
            f"open({str(pause)!r}, 'w').write('x')\n"
            "time.sleep(60)\n"
        )
    code += "open(me + '-' + str(n) + '.txt', 'w').write(me)\n"
    return python_agent(code)


def setup(host: Host, tmp_path: Path, *, remote: bool) -> tuple[str, Path, Path]:
    """A workflow on a repository (with a bare remote `origin` when `remote`); the workflow id,
    the repository and the bare remote."""
    repo = make_repo(tmp_path / "repo")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    wf = board(host, tmp_path, repo)
    if remote:
        host.workflows.set_remote(wf, "origin")
    return wf, repo, bare


def remote_files(bare: Path, branch: str) -> list[str]:
    listed = git(bare, "ls-tree", "--name-only", f"refs/heads/{branch}")
    return sorted(listed.split())


def card_waits_for(host: Host, wf: str, task: str) -> Any:
    """The board's card of `task`: its `waits_for_host` badge (what the page says)."""
    from core.serve import board_view

    with host.store.read() as conn:
        view = board_view.read(
            conn, host.workflows.by_id(wf), board_view.BoardQuery(), lambda: None
        )
    (card,) = [c for c in view["tasks"] if c["id"] == task]
    return card["badges"]["waits_for_host"]


def events_of(host: Host, task: str, kind: str) -> list[dict[str, Any]]:
    from core.store import tables as t

    with host.store.read() as conn:
        rows = conn.execute(
            t.board_events.select().where(
                t.board_events.c.task_id == task, t.board_events.c.type == kind
            )
        ).mappings()
        return [dict(r) for r in rows]


def test_issue_43_item_2_the_next_turn_runs_on_beta_and_sees_alphas_files(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    """With a remote: alpha's turn ends by pushing the task's branch (its uncommitted files
    committed by laneway, saying so); beta's worker claims the next run (item 1's remote
    exception), re-creates the worktree from the remote and sees every file alpha left; the
    record moves to beta; back on alpha, alpha sees beta's files too. The person's branches
    on the remote are never touched: only `laneway/<8>` is pushed."""
    alpha, beta = machine(tmp_path, "alpha"), machine(tmp_path, "beta")
    log = tmp_path / "seen.log"
    wf, repo, bare = setup(host, tmp_path, remote=True)
    main_before = git(bare, "rev-parse", "refs/heads/main").strip()
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("v", command=visiting_agent(log), pass_env=["MACHINE"]).id

    enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=alpha)["finished"] == 1
    record = host.tasks.get(task).workspace
    assert record is not None
    branch = record["branch"]
    assert (record["host"], record["push"]["remote"]) == ("alpha", "origin")
    assert remote_files(bare, branch) == ["README.md", "alpha-0.txt"]
    subject = git(bare, "log", "-1", "--format=%s", f"refs/heads/{branch}")
    assert subject.startswith("laneway: work left uncommitted by a turn of task")

    second = enqueue(host, agent, task)
    listed = {r["id"]: r for r in cli(db_url, tmp_path, "runs", "list", env=beta)}
    assert listed[second]["waits_for_host"] is None
    assert card_waits_for(host, wf, task) is None  # its branch travels: any worker
    on_beta = cli(db_url, tmp_path, "worker", "--once", env=beta)
    assert (on_beta["claimed"], on_beta["finished"], on_beta["failed"]) == (1, 1, 0)
    assert status(host, second) == "finished"
    moved = host.tasks.get(task).workspace
    assert moved is not None
    assert (moved["host"], moved["home_host"]) == ("beta", "alpha")
    assert Path(moved["path"]) == tmp_path / "worktrees-beta" / task
    assert remote_files(bare, branch) == ["README.md", "alpha-0.txt", "beta-1.txt"]
    assert len(events_of(host, task, "task.worktree_moved")) == 1

    enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=alpha)["finished"] == 1
    assert log.read_text().splitlines() == [
        "alpha saw ",
        "beta saw alpha-0.txt",
        "alpha saw alpha-0.txt,beta-1.txt",
    ]
    # alpha's own repository's branch holds it all again (merge and diff there see it)
    assert sorted(git(repo, "ls-tree", "--name-only", f"refs/heads/{branch}").split()) == [
        "README.md", "alpha-0.txt", "alpha-2.txt", "beta-1.txt",
    ]  # fmt: skip
    assert git(bare, "rev-parse", "refs/heads/main").strip() == main_before
    assert sorted(
        r.removeprefix("refs/heads/")
        for r in git(bare, "for-each-ref", "--format=%(refname)").split()
    ) == sorted(["main", branch])
    assert host.runs.list(status="failed") == []


def test_issue_43_item_1_without_a_remote_beta_never_claims_and_nothing_fails(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    """No remote: the run of alpha's task waits for alpha (the claim's statement), nothing
    is pushed, nothing fails."""
    alpha, beta = machine(tmp_path, "alpha"), machine(tmp_path, "beta")
    log = tmp_path / "seen.log"
    wf, _repo, bare = setup(host, tmp_path, remote=False)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("v", command=visiting_agent(log), pass_env=["MACHINE"]).id
    enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=alpha)["finished"] == 1
    second = enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=beta)["claimed"] == 0
    assert status(host, second) == "queued"
    assert card_waits_for(host, wf, task) == "alpha"
    record = host.tasks.get(task).workspace
    assert record is not None
    assert "push" not in record
    assert git(bare, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
    assert host.runs.list(status="failed") == []


def test_issue_43_item_2_a_push_that_fails_keeps_the_task_on_its_host(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    """The remote is down at the end of alpha's second turn: the task is `held` on alpha (an
    event and a WARNING say so), beta never claims its next run, alpha does, and once the
    remote is back alpha's push carries both turns' files and beta may take it again."""
    alpha, beta = machine(tmp_path, "alpha"), machine(tmp_path, "beta")
    log = tmp_path / "seen.log"
    wf, _repo, bare = setup(host, tmp_path, remote=True)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("v", command=visiting_agent(log), pass_env=["MACHINE"]).id
    enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=alpha)["finished"] == 1

    away = tmp_path / "remote-away.git"
    bare.rename(away)  # the remote is down
    enqueue(host, agent, task)
    done = laneway("--db", db_url, "--json", "worker", "--once", cwd=tmp_path, env=alpha)
    assert json.loads(done.stdout)["finished"] == 1
    assert "could not be pushed: the task stays on this host" in done.stderr
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["held"]["why"]
    (failed,) = events_of(host, task, "task.push_failed")
    assert json.loads(failed["data"])["remote"] == "origin"
    third = enqueue(host, agent, task)
    listed = {r["id"]: r for r in cli(db_url, tmp_path, "runs", "list", env=beta)}
    assert listed[third]["waits_for_host"] == "alpha"
    assert card_waits_for(host, wf, task) == "alpha"
    assert cli(db_url, tmp_path, "worker", "--once", env=beta)["claimed"] == 0

    away.rename(bare)  # back
    assert cli(db_url, tmp_path, "worker", "--once", env=alpha)["finished"] == 1
    record = host.tasks.get(task).workspace
    assert record is not None
    assert "held" not in record
    assert remote_files(bare, record["branch"]) == [
        "README.md", "alpha-0.txt", "alpha-1.txt", "alpha-2.txt",
    ]  # fmt: skip
    enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=beta)["finished"] == 1
    assert log.read_text().splitlines()[-1] == "beta saw alpha-0.txt,alpha-1.txt,alpha-2.txt"
    assert host.runs.list(status="failed") == []


def start_worker(db_url: str, tmp_path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [laneway_script(), "--db", db_url, "worker"],
        cwd=tmp_path,
        env=script_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def kill_group(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.parametrize("killed", ["alpha", "beta"])
def test_issue_43_item_2_kill_9_of_a_worker_mid_turn_loses_no_committed_work(
    host: Host, db_url: str, tmp_path: Path, killed: str
) -> None:
    """`kill -9` of the worker (and its agent) mid-turn, on either host: the run is recovered
    and taken again from what the remote holds (every file an ended turn left), the killed
    turn's partial file is kept in the killed host's repository under `refs/laneway/left/`
    when that host re-creates the worktree, and no ended turn runs twice."""
    alpha, beta = machine(tmp_path, "alpha"), machine(tmp_path, "beta")
    other = beta if killed == "alpha" else alpha
    log = tmp_path / "seen.log"
    pause = tmp_path / "paused"
    wf, _repo, bare = setup(host, tmp_path, remote=True)
    task = host.tasks.create(workflow=wf, title="card").id
    quick = host.profiles.add("v", command=visiting_agent(log), pass_env=["MACHINE"]).id
    slow = host.profiles.add("s", command=visiting_agent(log, pause), pass_env=["MACHINE"]).id
    enqueue(host, quick, task)
    first = beta if killed == "beta" else alpha
    assert cli(db_url, tmp_path, "worker", "--once", env=first)["finished"] == 1

    run = enqueue(host, slow, task)
    worker = start_worker(db_url, tmp_path, {**(alpha if killed == "alpha" else beta)})
    try:
        wait_for(pause.exists, "the agent's pause")
    finally:
        kill_group(worker)
    assert status(host, run) == "claimed"
    # the dead worker's claim is recovered (its liveness lock is gone): the run is queued again
    cli(db_url, tmp_path, "recover", env=other)
    assert status(host, run) == "queued"
    host.profiles.set(slow, command=visiting_agent(log))
    assert cli(db_url, tmp_path, "worker", "--once", env=other)["finished"] == 1
    assert status(host, run) == "finished"
    me = other["MACHINE"]
    lines = log.read_text().splitlines()
    assert lines[0] == f"{first['MACHINE']} saw "
    # the killed turn saw the first turn's file; the run taken again saw it too, on the other host
    assert lines[-1] == f"{me} saw {first['MACHINE']}-0.txt"
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["host"] == me
    files = remote_files(bare, record["branch"])
    assert f"{first['MACHINE']}-0.txt" in files
    assert [f for f in files if f.startswith(me + "-")] == [f"{me}-2.txt"]
    # no turn ran twice: one line per turn that began (the killed one included)
    assert len(lines) == 3
    if killed == "alpha":
        # back on alpha: the killed turn's partial file, never pushed, is kept, not thrown away
        enqueue(host, quick, task)
        assert cli(db_url, tmp_path, "worker", "--once", env=alpha)["finished"] == 1
        kept = git(_repo, "for-each-ref", "--format=%(refname)", "refs/laneway/left/")
        (ref,) = [r for r in kept.split() if not r.endswith("-branch")]
        shown = git(_repo, "ls-tree", "--name-only", ref).split()
        assert "partial-alpha.txt" in shown


@pytest.mark.parametrize("point", ["travel.before_push", "travel.after_push"])
def test_issue_43_item_2_a_worker_killed_at_the_remote_push_loses_nothing(
    host: Host, db_url: str, tmp_path: Path, point: str
) -> None:
    """`LANEWAY_FAULT` kills alpha's worker just before, or just after, the push of its second
    turn's branch (the record not yet saying so). The run is recovered; beta takes it and its
    turn sees what the remote has (after the push: alpha's second turn's file too), and beta's
    own push is accepted by the lease (the record names the commit beta fetched): nothing
    refused, nothing failed."""
    alpha, beta = machine(tmp_path, "alpha"), machine(tmp_path, "beta")
    log = tmp_path / "seen.log"
    wf, _repo, bare = setup(host, tmp_path, remote=True)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("v", command=visiting_agent(log), pass_env=["MACHINE"]).id
    enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=alpha)["finished"] == 1
    run = enqueue(host, agent, task)
    died = laneway("--db", db_url, "worker", "--once", cwd=tmp_path,
                   env={**alpha, "LANEWAY_FAULT": point})  # fmt: skip
    assert died.returncode == 99, died.stderr
    branch = (host.tasks.get(task).workspace or {})["branch"]
    pushed = point == "travel.after_push"
    assert ("alpha-1.txt" in remote_files(bare, branch)) is pushed
    cli(db_url, tmp_path, "recover", env=beta)
    assert status(host, run) == "queued"
    assert cli(db_url, tmp_path, "worker", "--once", env=beta)["finished"] == 1
    seen = log.read_text().splitlines()[-1]
    assert seen == ("beta saw alpha-0.txt,alpha-1.txt" if pushed else "beta saw alpha-0.txt")
    record = host.tasks.get(task).workspace
    assert record is not None
    assert (record["host"], record.get("held")) == ("beta", None)
    assert "beta-2.txt" in remote_files(bare, branch)
    assert host.runs.list(status="failed") == []


@pytest.mark.parametrize("notices", ["recover", "worker"])
def test_issue_43_item_1_a_host_no_worker_is_alive_on_is_said_once(
    host: Host, db_url: str, tmp_path: Path, notices: str
) -> None:
    """A run waits for alpha (no remote). While a worker on alpha is alive (serving another
    profile) nothing is said; once it is `kill -9`ed, `recover` or a worker's scheduler pass
    on beta says so (one `host.unattended` event, one WARNING), and neither a later `recover`
    nor a later pass says it again."""
    alpha, beta = machine(tmp_path, "alpha"), machine(tmp_path, "beta")
    now = {"LANEWAY_UNATTENDED_S": "0"}
    log = tmp_path / "seen.log"
    wf, _repo, _bare = setup(host, tmp_path, remote=False)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("v", command=visiting_agent(log), pass_env=["MACHINE"]).id
    host.profiles.add("other", command=visiting_agent(log))
    enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=alpha)["finished"] == 1
    run = enqueue(host, agent, task)

    worker = subprocess.Popen(
        [laneway_script(), "--db", db_url, "worker", "--profiles", "other"],
        cwd=tmp_path, env=script_env(alpha), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:

        def registered() -> bool:
            from core.store import tables as t

            with host.store.read() as conn:
                found = conn.execute(
                    t.host_epochs.select().where(
                        t.host_epochs.c.hostname == "alpha",
                        t.host_epochs.c.worker.is_(True),
                        t.host_epochs.c.closed_at.is_(None),
                    )
                ).all()
            return bool(found)

        wait_for(registered, "alpha's worker")
        assert cli(db_url, tmp_path, "recover", env={**beta, **now})["hosts_unattended"] == []
    finally:
        kill_group(worker)
    if notices == "recover":
        said = laneway("--db", db_url, "--json", "recover", cwd=tmp_path, env={**beta, **now})
        assert json.loads(said.stdout)["hosts_unattended"] == ["alpha"]
    else:  # a worker's scheduler pass (on beta: it cannot take the run itself)
        said = laneway("--db", db_url, "--json", "worker", "--once", cwd=tmp_path,
                       env={**beta, **now})  # fmt: skip
        assert json.loads(said.stdout)["claimed"] == 0
    assert said.returncode == 0, said.stderr
    assert said.stderr.count("WARNING  | core.services.unattended") == 1
    (event,) = events_of_all(host, "host.unattended")
    assert json.loads(event["data"])["host"] == "alpha"
    assert json.loads(event["data"])["run_id"] == run
    again = laneway("--db", db_url, "--json", "recover", cwd=tmp_path, env={**beta, **now})
    assert json.loads(again.stdout)["hosts_unattended"] == []
    passed = laneway("--db", db_url, "--json", "worker", "--once", cwd=tmp_path,
                     env={**beta, **now})  # fmt: skip
    assert json.loads(passed.stdout)["claimed"] == 0
    assert "WARNING  | core.services.unattended" not in passed.stderr
    assert len(events_of_all(host, "host.unattended")) == 1
    assert status(host, run) == "queued"


def events_of_all(host: Host, kind: str) -> list[dict[str, Any]]:
    from core.store import tables as t

    with host.store.read() as conn:
        rows = conn.execute(t.board_events.select().where(t.board_events.c.type == kind))
        return [dict(r) for r in rows.mappings()]


def test_issue_43_item_2_task_merge_on_the_home_host_lands_the_work_done_elsewhere(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    """alpha's turn, then beta's: `task merge` run on alpha (whose repository's branch still
    stands where alpha left it) brings the branch home from the remote first, so main gets
    both turns' files; alpha's left worktree is set aside, nothing of it lost."""
    alpha, beta = machine(tmp_path, "alpha"), machine(tmp_path, "beta")
    log = tmp_path / "seen.log"
    wf, repo, _bare = setup(host, tmp_path, remote=True)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add("v", command=visiting_agent(log), pass_env=["MACHINE"]).id
    enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=alpha)["finished"] == 1
    enqueue(host, agent, task)
    assert cli(db_url, tmp_path, "worker", "--once", env=beta)["finished"] == 1
    merged = cli(db_url, tmp_path, "task", "merge", task, env=alpha)
    assert merged["into"] == "main"
    assert sorted(git(repo, "ls-tree", "--name-only", "main").split()) == [
        "README.md", "alpha-0.txt", "beta-1.txt",
    ]  # fmt: skip
    assert not (tmp_path / "worktrees-alpha" / task).exists()
