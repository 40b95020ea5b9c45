"""The runs worker: claiming order, exclusive claims, per-agent limits, orphans re-queued by
epoch, and `work()` running agents to the end of their turns."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.agents import worker
from core.agents.values import TurnOutcome
from core.host import Host
from core.runs import Requeued
from tests.agents.conftest import (
    R,
    enqueue,
    plain_workflow,
    python_agent,
    recorder,
    run_rows,
    set_run,
    stamp,
)
from tests.conftest import open_host

OK = python_agent("import sys; sys.stdin.read()")


def _tasks(host: Host, tmp_path: Path, n: int) -> list[str]:
    wf = plain_workflow(host, tmp_path)
    return [host.tasks.create(workflow=wf, title=f"task {i}").id for i in range(n)]


def test_claims_the_oldest_queued_run_first(host: Host, tmp_path: Path) -> None:
    (task,) = _tasks(host, tmp_path, 1)
    agents = [host.profiles.add(f"agent-{i}", command=OK).id for i in range(4)]
    runs = [enqueue(host, a, task) for a in agents]
    # Make the request order the opposite of insertion (and of id order, whatever it is).
    for age, run_id in enumerate(runs):
        set_run(host, run_id, requested_at=stamp(-10 * age))
    claimed = [worker.claim_next(host) for _ in runs]
    assert [c.id if c else None for c in claimed] == list(reversed(runs))
    assert worker.claim_next(host) is None
    with host.store.read() as conn:
        epochs = set(conn.execute(sa.select(R.c.claimed_epoch)).scalars())
    assert epochs == {host.epoch}


def test_two_claimers_never_take_one_run(host: Host, tmp_path: Path) -> None:
    tasks = _tasks(host, tmp_path, 40)  # a session's runs are one at a time: a task each
    agent = host.profiles.add("busy", command=OK, max_concurrent_sessions=100).id
    runs = {enqueue(host, agent, task) for task in tasks}
    start = threading.Barrier(2)
    taken: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def claimer(mine: list[str]) -> None:
        try:
            start.wait(timeout=10)
            while (run := worker.claim_next(host)) is not None:
                mine.append(run.id)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(mine,)) for mine in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    first, second = taken
    assert not set(first) & set(second)
    assert len(first) + len(second) == len(runs)
    assert set(first) | set(second) == runs
    with host.store.read() as conn:
        statuses = conn.execute(
            sa.select(R.c.status, R.c.claimed_epoch, sa.func.count()).group_by(
                R.c.status, R.c.claimed_epoch
            )
        ).all()
    assert [tuple(s) for s in statuses] == [("claimed", host.epoch, len(runs))]


def test_one_claimed_run_per_agent_unless_its_profile_allows_more(
    host: Host, tmp_path: Path
) -> None:
    tasks = _tasks(host, tmp_path, 3)  # a session's runs are one at a time: a task each
    solo = host.profiles.add("solo", command=OK).id
    duo = host.profiles.add("duo", command=OK, max_concurrent_sessions=2).id
    solo_runs = [enqueue(host, solo, task) for task in tasks[:2]]
    duo_runs = [enqueue(host, duo, task) for task in tasks]
    claimed = []
    while (run := worker.claim_next(host)) is not None:
        claimed.append(run)
    assert sorted(r.agent_profile_id for r in claimed) == sorted([solo, duo, duo])
    # The solo agent's run ends: its next run may be claimed now, and only that one.
    first_solo = next(r for r in claimed if r.agent_profile_id == solo)
    worker.finish(host, first_solo, TurnOutcome("", ok=True))
    again = worker.claim_next(host)
    assert again is not None
    assert again.agent_profile_id == solo
    assert again.id in solo_runs
    assert worker.claim_next(host) is None
    assert len(duo_runs) == 3


def _intervals(path: Path) -> dict[str, tuple[float, float]]:
    seen: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        _what, run, at = line.split()
        seen.setdefault(run, []).append(float(at))
    return {run: (times[0], times[1]) for run, times in seen.items()}


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_work_runs_one_turn_per_agent_at_a_time_unless_allowed(host: Host, tmp_path: Path) -> None:
    tasks = _tasks(host, tmp_path, 4)
    solo_log, duo_log = tmp_path / "solo.log", tmp_path / "duo.log"
    solo = host.profiles.add("solo", command=recorder(solo_log, 0.4)).id
    duo = host.profiles.add("duo", command=recorder(duo_log, 0.4), max_concurrent_sessions=2).id
    for task in tasks[:2]:
        enqueue(host, solo, task)
    for task in tasks[2:]:
        enqueue(host, duo, task)
    summary = worker.work(host, once=True, concurrency=4)
    assert summary.as_dict() == {"claimed": 4, "finished": 4, "failed": 0}
    first, second = _intervals(solo_log).values()
    assert not _overlap(first, second)
    first, second = _intervals(duo_log).values()
    assert _overlap(first, second)


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_runs_left_claimed_by_a_gone_process_are_requeued_and_finished(
    db_url: str, tmp_path: Path, laneway_logs: list[dict[str, Any]]
) -> None:
    with open_host(db_url) as a:
        (task,) = _tasks(a, tmp_path, 1)
        agents = [a.profiles.add(f"agent-{i}", command=OK).id for i in range(2)]
        by_a = enqueue(a, agents[0], task)
        claimed = worker.claim_next(a)
        assert claimed is not None
        assert claimed.id == by_a
        dead = enqueue(a, agents[1], task)
        # A process that died holding a claim: its epoch is no host's now.
        set_run(a, dead, status="claimed", claimed_at=stamp(0), claimed_epoch="dead")
        epoch_a = a.epoch
    rows = {r["id"]: r for r in run_rows(db_url)}
    assert rows[by_a]["status"] == "claimed"
    assert rows[by_a]["claimed_epoch"] == epoch_a
    assert rows[dead]["claimed_epoch"] == "dead"

    with open_host(db_url) as b:
        summary = worker.work(b, once=True)
        assert summary.as_dict() == {"claimed": 2, "finished": 2, "failed": 0}
        rows = {r["id"]: r for r in run_rows(db_url)}
        assert {rows[by_a]["status"], rows[dead]["status"]} == {"finished"}
        assert len(rows) == 2
    requeued = [r for r in laneway_logs if r["level"] == "WARNING" and "attempts" in r["extra"]]
    assert sorted(r["extra"]["run_id"] for r in requeued) == sorted([by_a, dead])
    assert all(r["extra"]["attempts"] < r["extra"]["max_attempts"] for r in requeued)


def test_a_claim_of_this_process_is_never_requeued(host: Host, tmp_path: Path) -> None:
    (task,) = _tasks(host, tmp_path, 1)
    agent = host.profiles.add("agent", command=OK).id
    run_id = enqueue(host, agent, task)
    assert worker.claim_next(host) is not None
    assert worker.requeue_orphans(host) == Requeued()
    with host.store.read() as conn:
        status = conn.execute(sa.select(R.c.status).where(R.c.id == run_id)).scalar()
    assert status == "claimed"


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_stop_claims_nothing_more_and_lets_the_running_turn_end(host: Host, tmp_path: Path) -> None:
    tasks = _tasks(host, tmp_path, 2)
    log = tmp_path / "turns.log"
    agent = host.profiles.add("slow", command=recorder(log, 0.5)).id
    runs = [enqueue(host, agent, task) for task in tasks]
    stop = threading.Event()

    def progress(kind: str, _run: Any, _outcome: Any) -> None:
        if kind == "claimed":
            stop.set()  # as Ctrl-C would, right after the first claim

    summary = worker.work(host, once=False, stop=stop, progress=progress, idle_wait=0.05)
    assert summary.as_dict() == {"claimed": 1, "finished": 1, "failed": 0}
    statuses = {r.id: r.status for r in host.runs.list()}
    assert sorted(statuses[r] for r in runs) == ["finished", "queued"]
    assert len(_intervals(log)) == 1
