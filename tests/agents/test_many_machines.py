"""Issue 43 ("Many machines"), items 1 and 3: a run goes to a worker that can do it.

Two "hosts" on one machine (`LANEWAY_HOST=alpha|beta`, each its own `LANEWAY_WORKTREES`), real
`laneway worker` processes, a real git repository, on both databases. Each agent writes its
profile and the machine of the worker that ran it (`MACHINE`, set beside `LANEWAY_HOST` and
passed to the agent: a worker's own LANEWAY_* variables never reach an agent) to a log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.host import Host
from tests.agents.conftest import enqueue, laneway, plain_workflow, python_agent
from tests.agents.test_worktrees import board, make_repo

pytestmark = pytest.mark.slow  # real worker processes: the subprocess tier


def logging_agent(log: Path, name: str) -> list[str]:
    """An exec agent that appends `<name> <its worker's machine>` to `log`."""
    code = (
        "import os, sys; sys.stdin.read()\n"
        f"open({str(log)!r}, 'a').write({name!r} + ' ' + os.environ.get('MACHINE', '?')"
        " + '\\n')\n"
    )
    return python_agent(code)


def machine(tmp_path: Path, name: str) -> dict[str, str]:
    return {
        "LANEWAY_HOST": name,
        "MACHINE": name,
        "LANEWAY_WORKTREES": str(tmp_path / f"worktrees-{name}"),
    }


def status(host: Host, run_id: str) -> str:
    run = host.runs.get(run_id)
    assert run is not None
    return run.status


def cli(db_url: str, tmp_path: Path, *args: str, env: dict[str, str]) -> Any:
    done = laneway("--db", db_url, "--json", *args, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_issue_43_item_1_a_run_of_a_task_whose_worktree_is_on_alpha_waits_for_alpha(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    """beta's worker never claims the run of alpha's task (nothing fails, no on_agent_error:
    the run stays queued and says what it waits for); alpha's worker then runs it."""
    alpha, beta = machine(tmp_path, "alpha"), machine(tmp_path, "beta")
    log = tmp_path / "ran.log"
    repo = make_repo(tmp_path / "repo")
    wf = board(host, tmp_path, repo)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add(
        "writer", command=logging_agent(log, "writer"), pass_env=["MACHINE"]
    ).id

    enqueue(host, agent, task)
    first = cli(db_url, tmp_path, "worker", "--once", env=alpha)
    assert (first["claimed"], first["finished"]) == (1, 1)
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["host"] == "alpha"

    second = enqueue(host, agent, task)
    on_beta = cli(db_url, tmp_path, "worker", "--once", env=beta)
    assert (on_beta["claimed"], on_beta["failed"]) == (0, 0)
    listed = {r["id"]: r for r in cli(db_url, tmp_path, "runs", "list", env=beta)}
    assert listed[second]["status"] == "queued"
    assert listed[second]["waits_for_host"] == "alpha"
    assert sorted(r["status"] for r in listed.values()) == ["finished", "queued"]
    plain = laneway("--db", db_url, "runs", "list", cwd=tmp_path, env=beta).stdout
    (line,) = [x for x in plain.splitlines() if x.startswith(second)]
    assert line.endswith("(waits for a worker on alpha)")
    assert not (tmp_path / "worktrees-beta").exists()

    on_alpha = cli(db_url, tmp_path, "worker", "--once", env=alpha)
    assert (on_alpha["claimed"], on_alpha["finished"]) == (1, 1)
    assert status(host, second) == "finished"
    assert log.read_text().splitlines() == ["writer alpha", "writer alpha"]
    listed = cli(db_url, tmp_path, "runs", "list", env=beta)
    assert [r["waits_for_host"] for r in listed] == [None, None]


def test_issue_43_item_1_a_task_without_a_worktree_runs_anywhere(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    """No repository, no worktree: beta's worker takes the run as before."""
    log = tmp_path / "ran.log"
    wf = plain_workflow(host, tmp_path)
    task = host.tasks.create(workflow=wf, title="card").id
    agent = host.profiles.add(
        "writer", command=logging_agent(log, "writer"), pass_env=["MACHINE"]
    ).id
    enqueue(host, agent, task)
    done = cli(db_url, tmp_path, "worker", "--once", env=machine(tmp_path, "beta"))
    assert (done["claimed"], done["finished"]) == (1, 1)
    assert log.read_text().splitlines() == ["writer beta"]


def test_issue_43_item_3_workers_serve_only_their_profiles(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    """`worker --profiles` by name and by id: each run done by a worker serving its profile,
    combined with hosts in the same claim (a worktree on alpha still waits for alpha)."""
    log = tmp_path / "ran.log"
    wf = plain_workflow(host, tmp_path)
    tasks = [host.tasks.create(workflow=wf, title=f"card {i}").id for i in range(4)]
    codex = host.profiles.add("codex", command=logging_agent(log, "codex"), pass_env=["MACHINE"]).id
    gpu = host.profiles.add("gpu", command=logging_agent(log, "gpu"), pass_env=["MACHINE"]).id
    for task, agent in zip(tasks, [codex, gpu, gpu, codex], strict=True):
        enqueue(host, agent, task)

    one = cli(db_url, tmp_path, "worker", "--once", "--profiles", "Codex",
              env=machine(tmp_path, "one"))  # fmt: skip
    assert (one["claimed"], one["finished"]) == (2, 2)
    queued = host.runs.list(status="queued")
    assert sorted(r.agent_profile_id for r in queued) == [gpu, gpu]
    two = cli(db_url, tmp_path, "worker", "--once", "--profiles", f"{gpu},codex",
              env=machine(tmp_path, "two"))  # fmt: skip
    assert (two["claimed"], two["finished"]) == (2, 2)
    assert sorted(log.read_text().splitlines()) == [
        "codex one", "codex one", "gpu two", "gpu two",
    ]  # fmt: skip

    # hosts and profiles in one statement: a gpu run of alpha's task waits for alpha
    repo = make_repo(tmp_path / "repo")
    host.workflows.set_repository(wf, str(repo), None)
    task = host.tasks.create(workflow=wf, title="placed").id
    enqueue(host, gpu, task)
    assert cli(db_url, tmp_path, "worker", "--once", "--profiles", "gpu",
               env=machine(tmp_path, "alpha"))["finished"] == 1  # fmt: skip
    run = enqueue(host, gpu, task)
    assert cli(db_url, tmp_path, "worker", "--once", "--profiles", "gpu",
               env=machine(tmp_path, "beta"))["claimed"] == 0  # fmt: skip
    assert cli(db_url, tmp_path, "worker", "--once", "--profiles", "codex",
               env=machine(tmp_path, "alpha"))["claimed"] == 0  # fmt: skip
    assert status(host, run) == "queued"


def test_issue_43_item_3_an_unknown_profile_is_refused(db_url: str, tmp_path: Path) -> None:
    assert laneway("--db", db_url, "init", cwd=tmp_path).returncode == 0
    done = laneway("--db", db_url, "worker", "--once", "--profiles", "nope", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].endswith("no agent profile 'nope'")
    assert "Traceback" not in done.stderr
