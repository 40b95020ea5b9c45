"""A session's runs are claimed one at a time. A run's turn runs in its task's session for its
agent (core.agents.session), so two runs of one task and agent claimed at once would run two
turns of one conversation side by side: each overwrote the other's bookkeeping and one agent
connection was left open until its worker stopped. The claim passes over a run whose session
has a claimed run (AC-B9's many workers on one board), and on PostgreSQL, where two claims
can each miss the other's uncommitted one, a unique index on claimed sessions decides."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from core import runs
from core.agents import worker
from core.agents.values import TurnOutcome
from core.host import Host
from core.store import tables as t
from tests.agents.conftest import enqueue, plain_workflow, python_agent, recorder
from tests.agents.test_agents_worker import _intervals, _overlap
from tests.cli.conftest import Laneway
from tests.interleave import Hold, race

OK = python_agent("import sys; sys.stdin.read()")


def _status(host: Host, run_id: str) -> str:
    with host.store.read() as conn:
        return str(conn.execute(sa.select(t.runs.c.status).where(t.runs.c.id == run_id)).scalar())


def _claimed_runs(host: Host, agent: str) -> int:
    with host.store.read() as conn:
        return int(
            conn.execute(
                sa.select(t.agent_profiles.c.claimed_runs).where(t.agent_profiles.c.id == agent)
            ).scalar_one()
        )


def test_a_sessions_second_run_waits_for_its_first_and_others_pass_it(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    """An agent allowed three sessions at once: the second run of a task waits while the
    first is claimed (`runs list` says for which run), a run of another task is claimed past
    it, and it is claimed once the first ends."""
    wf = plain_workflow(host, tmp_path)
    one, two = (host.tasks.create(workflow=wf, title=f"task {n}").id for n in (1, 2))
    agent = host.profiles.add("coder", command=OK, max_concurrent_sessions=3).id
    first, second, other = (
        enqueue(host, agent, one),
        enqueue(host, agent, one),
        enqueue(host, agent, two),
    )

    claimed = [worker.claim_next(host) for _ in range(3)]
    assert [c.id if c else None for c in claimed] == [first, other, None]
    assert _status(host, second) == "queued"
    assert _claimed_runs(host, agent) == 2
    cli = Laneway(db_url)
    listed = {r["id"]: r for r in cli.json("runs", "list")}
    assert listed[second]["waits_for_run"] == first
    assert listed[other]["waits_for_run"] is None
    line = next(x for x in cli.run("runs", "list").stdout.splitlines() if x.startswith(second))
    assert line.endswith(f"(waits for its session's run {first} to end)")

    assert claimed[0] is not None
    worker.finish(host, claimed[0], TurnOutcome("", ok=True))
    again = worker.claim_next(host)
    assert again is not None
    assert again.id == second
    assert worker.claim_next(host) is None


def test_two_claims_of_one_sessions_runs_at_once_take_one(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two claimers at once, the first held with its claim made and not committed: of the
    session's two runs exactly one is claimed, and the agent's count says one. (On PostgreSQL
    the second claim cannot see the first's uncommitted one: the index of claimed sessions
    fails it once the first commits, and it claims again, past the busy session.)"""
    wf = plain_workflow(host, tmp_path)
    task = host.tasks.create(workflow=wf, title="one session").id
    agent = host.profiles.add("coder", command=OK, max_concurrent_sessions=5).id
    both = {enqueue(host, agent, task), enqueue(host, agent, task)}
    hold = Hold()
    monkeypatch.setattr(runs, "claim_next", hold.after(runs.claim_next))
    taken: list[str | None] = []
    lock = threading.Lock()

    def claim() -> None:
        found = worker.claim_next(host)
        with lock:
            taken.append(found.id if found is not None else None)

    race(hold, claim, claim)

    assert len([r for r in taken if r is not None]) == 1
    assert sorted(_status(host, r) for r in both) == ["claimed", "queued"]
    assert _claimed_runs(host, agent) == 1


@pytest.mark.slow  # it starts agent processes: the subprocess tier
def test_a_worker_running_two_at_once_runs_a_sessions_turns_one_after_the_other(
    host: Host, tmp_path: Path
) -> None:
    """A worker with room for three turns and agents allowed two sessions: a task's two runs
    run one after the other, in the order asked, while two tasks' runs run side by side."""
    wf = plain_workflow(host, tmp_path)
    one, two = (host.tasks.create(workflow=wf, title=f"task {n}").id for n in (1, 2))
    same_log, apart_log = tmp_path / "same.log", tmp_path / "apart.log"
    same = host.profiles.add("same", command=recorder(same_log, 0.4), max_concurrent_sessions=2)
    apart = host.profiles.add(
        "apart", command=recorder(apart_log, meet=2), max_concurrent_sessions=2
    )
    first, second = enqueue(host, same.id, one), enqueue(host, same.id, one)
    enqueue(host, apart.id, one)
    enqueue(host, apart.id, two)

    summary = worker.work(host, once=True, concurrency=3)

    assert summary.as_dict() == {"claimed": 4, "finished": 4, "failed": 0}
    turns = _intervals(same_log)
    assert not _overlap(turns[first], turns[second])
    assert turns[first][1] <= turns[second][0]
    (one_turn, two_turn) = _intervals(apart_log).values()
    assert _overlap(one_turn, two_turn)
    sessions = [s for s in host.sessions.list(task=one) if s.agent_profile_id == same.id]
    assert len(sessions) == 1
