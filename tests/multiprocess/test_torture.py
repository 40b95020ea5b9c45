"""Issue "Many processes, one board": the torture test.

Three `laneway worker` processes, two processes moving tasks in and out of an Office Review
step and one recording reviewer verdicts share one database. Every fraction of a second one of
them, at random, is killed with SIGKILL and a replacement started. Afterwards, once quiet (the
survivors stopped, `laneway recover` run), the board is checked:

- every entry is terminal (recovery resumed or closed what the dead left);
- at most one run per reviewer per entry, exactly one when the entry's fan-out is done, and no
  idempotency key twice;
- no verdict a `decision record` returned for round N, recorded after round N's
  clear_decisions had committed, was deleted unless a newer round (an entry with a higher
  entry_seq) began afterwards: each clear_decisions took effect once, for its own round. (A
  verdict recorded between round N's arrival and its clear's commit falls before the line the
  clear draws, and is cleared with the earlier rounds': `DecisionService.clear`.)
- no run is left claimed (a dead worker's claims went back to the queue);
- no run was executed to its end twice by workers that were never killed (the agents append
  what they ran to a file, with their worker's pid).

`LANEWAY_TORTURE_SECONDS` (default 20) sets how long the killing goes on; the counts are
written to `torture-report.json` in the test's directory and printed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.store import tables as t
from tests.conftest import open_host, wait_for_dead_processes
from tests.multiprocess.conftest import LANEWAY, Board, child_env

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("LANEWAY_TORTURE_SECONDS", "20"))
TASKS = 8
REVIEWERS = 2
WORK_S = 1.5

MOVER = textwrap.dedent(
    """
    import os, random, sys, time
    from core import Host
    from core.errors import LanewayError
    from core.plugin.selection import PluginSelection

    url, stop, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    host = Host.open(url, plugins=PluginSelection(allow=frozenset({"kanban", "office"})))
    tasks = [t.id for t in host.tasks.list()]
    while not os.path.exists(stop):
        task = host.tasks.get(rng.choice(tasks))
        _wf, step = host.workflows.step_by_id(task.workflow_step_id)
        try:
            host.tasks.move(task.id, "Work" if step.name == "Review" else "Review")
        except LanewayError:
            pass
        time.sleep(0.05 + rng.random() * 0.15)
    host.close()
    """
)

DECIDER = textwrap.dedent(
    """
    import os, random, sys, time
    import sqlalchemy as sa
    from core import Host
    from core.errors import LanewayError
    from core.store import tables as t
    from core.plugin.selection import PluginSelection

    url, stop, log, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    host = Host.open(url, plugins=PluginSelection(allow=frozenset({"kanban", "office"})))
    E = t.step_entries
    P = t.workflow_step_participants

    M = t.step_entry_markers

    def newest(task, step):
        with host.store.read() as conn:
            return conn.execute(sa.select(sa.func.max(E.c.entry_seq)).where(
                E.c.task_id == task, E.c.step_id == step)).scalar()

    def cleared(task, step, seq):
        # Whether round `seq`'s clear_decisions has committed: its commit is the line a
        # verdict falls on (one recorded before it belongs to the rounds it clears).
        with host.store.read() as conn:
            return conn.execute(sa.select(M.c.state).join(E, E.c.id == M.c.entry_id).where(
                E.c.task_id == task, E.c.step_id == step, E.c.entry_seq == seq,
                M.c.kind == "clear_decisions")).scalar() == "done"

    tasks = [t.id for t in host.tasks.list()]
    while not os.path.exists(stop):
        task = host.tasks.get(rng.choice(tasks))
        _wf, step = host.workflows.step_by_id(task.workflow_step_id)
        if step.name == "Review":
            with host.store.read() as conn:
                query = sa.select(P.c.id).where(P.c.step_id == step.id)
                seats = list(conn.execute(query).scalars())
            before = newest(task.id, step.id)
            after_clear = before is not None and cleared(task.id, step.id, before)
            try:
                done = host.decisions.record(task.id, "Review", rng.choice(seats), "rejected")
            except LanewayError:
                continue
            if after_clear and newest(task.id, step.id) == before:
                with open(log, "a") as out:
                    out.write(f"{done['decision'].id} {task.id} {step.id} {before}\\n")
        time.sleep(rng.random() * 0.03)
    host.close()
    """
)

AGENT = textwrap.dedent(
    """
    import os, sys, time
    sys.stdin.read()
    run, worker = os.environ["LANEWAY_RUN_ID"], os.getppid()
    time.sleep(0.05)
    with open({log!r}, "a") as out:
        out.write(f"end {{run}} {{worker}}\\n")
    """
)


class Cast:
    """The processes on the board, by role, with what it takes to replace one."""

    def __init__(self, board: Board, tmp: Path) -> None:
        self.board = board
        self.tmp = tmp
        self.stop = tmp / "stop"
        self.procs: list[tuple[str, subprocess.Popen[str]]] = []
        self.opened: dict[int, float] = {}
        self.killed_pids: set[int] = set()
        self.kills: Counter[str] = Counter()
        self.seed = 0

    def start(self, role: str) -> None:
        self.seed += 1
        log = open(self.tmp / f"{role}.log", "a")  # noqa: SIM115 - held by the child
        if role == "worker":
            argv = [LANEWAY, "--db", self.board.url, "worker", "--concurrency", "3"]
        elif role == "mover":
            argv = [sys.executable, "-c", MOVER, self.board.url, str(self.stop), str(self.seed)]
        else:
            argv = [sys.executable, "-c", DECIDER, self.board.url, str(self.stop),
                    str(self.tmp / "verdicts.log"), str(self.seed)]  # fmt: skip
        proc = subprocess.Popen(
            argv, cwd=self.tmp, env=child_env(), stdout=log, stderr=log, text=True
        )
        self.procs.append((role, proc))

    def kill_one(self, rng: random.Random) -> None:
        """SIGKILL one process that has been at work for a while: one whose epoch the board has
        recorded (its host is open) at least WORK_S ago. Start-up time varies a lot with the
        machine's load; being open is what makes a process worth killing."""
        now = time.monotonic()
        for pid in _open_pids(self.board.url):
            self.opened.setdefault(pid, now)
        grown = [
            i for i, (_r, p) in enumerate(self.procs)
            if now - self.opened.get(p.pid, now) >= WORK_S
        ]  # fmt: skip
        if not grown:
            return
        role, proc = self.procs.pop(rng.choice(grown))
        proc.kill()
        proc.wait(30)
        self.killed_pids.add(proc.pid)
        self.kills[role] += 1
        self.start(role)

    def quiet(self) -> None:
        """Movers and the decider stop on the stop file; workers on SIGINT, gracefully."""
        self.stop.touch()
        for role, proc in self.procs:
            if role == "worker":
                proc.send_signal(signal.SIGINT)
        for role, proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                self.killed_pids.add(proc.pid)
                self.kills[f"{role} (stuck at the end)"] += 1


def _until_busy(url: str, timeout: float = 240.0) -> None:
    """Start the killing once the board is at work: a Review entry and a run exist."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                entries = conn.execute(sa.select(sa.func.count()).select_from(t.step_entries))
                runs = conn.execute(sa.select(sa.func.count()).select_from(t.runs))
                counts = entries.scalar_one(), runs.scalar_one()
                if all(counts):
                    return
            time.sleep(0.2)
    finally:
        engine.dispose()
    pytest.fail("the board never got to work")


def _open_pids(url: str) -> set[int]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            return set(conn.execute(sa.select(t.host_epochs.c.pid)).scalars())
    finally:
        engine.dispose()


def _setup(board: Board, tmp: Path) -> dict[str, Any]:
    with open_host(board.url) as host:
        wf = host.workflows.create_from_template("office-default")
        command = [sys.executable, "-c", AGENT.format(log=str(tmp / "agents.log"))]
        for i in range(REVIEWERS):
            profile = host.profiles.add(
                f"reviewer-{i}", command=command, role="reviewer", max_concurrent_sessions=3
            )
            host.participants.add(
                step="Review", workflow=wf.id, role="reviewer", profile=profile.id,
                decision_required=True, position=i,
            )  # fmt: skip
        for i in range(TASKS):
            host.tasks.create(workflow=wf.id, title=f"task {i}")
        review = host.workflows.step(wf, "Review")
        return {"workflow": wf.id, "review": review.id}


def test_torture_kill_9_among_workers_movers_and_a_decider(db_url: str, tmp_path: Path) -> None:
    board = Board(db_url, tmp_path)
    board.json("init")
    ids = _setup(board, tmp_path)
    cast = Cast(board, tmp_path)
    try:
        for role in ("worker", "worker", "worker", "mover", "mover", "decider"):
            cast.start(role)
        rng = random.Random(int(os.environ.get("LANEWAY_TORTURE_SEED", "7")))
        _until_busy(db_url)
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.3 + rng.random() * 0.6)
            cast.kill_one(rng)
    finally:
        cast.quiet()
    wait_for_dead_processes(db_url)
    recovered = board.json("recover")
    report = _check(board, ids, cast, recovered, tmp_path)
    (tmp_path / "torture-report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))
    # the torture did torture: processes died mid-work and the board moved meanwhile
    assert report["kills_total"] >= 3
    assert report["review_entries"] > 0
    assert report["runs"] > 0


def _check(
    board: Board, ids: dict[str, Any], cast: Cast, recovered: dict[str, Any], tmp: Path
) -> dict[str, Any]:
    url = board.url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            entries = [dict(r) for r in conn.execute(sa.select(t.step_entries)).mappings()]
            markers = [dict(r) for r in conn.execute(sa.select(t.step_entry_markers)).mappings()]
            runs = [dict(r) for r in conn.execute(sa.select(t.runs)).mappings()]
            decisions = set(conn.execute(sa.select(t.workflow_step_decisions.c.id)).scalars())
            profiles = {r.id: r.claimed_runs for r in conn.execute(sa.select(t.agent_profiles))}
    finally:
        engine.dispose()

    # every entry terminal, once quiet and recovered
    assert [e for e in entries if not e["terminal"]] == []
    # at most one run per reviewer per entry; exactly one when the fan-out is done
    keys = Counter(r["idempotency_key"] for r in runs if r["reason"] == "review_started")
    assert [k for k, n in keys.items() if n > 1] == []
    by_entry: Counter[tuple[str, str, int]] = Counter()
    for key in keys:
        _, task, step, seq, *_ = key.split(":")
        by_entry[(task, step, int(seq))] += 1
    state = {(m["entry_id"], m["kind"]): m["state"] for m in markers}
    review_entries = [e for e in entries if e["step_id"] == ids["review"]]
    fanned = 0
    for e in review_entries:
        count = by_entry[(e["task_id"], e["step_id"], e["entry_seq"])]
        assert count <= REVIEWERS
        if state.get((e["id"], "queue_run_for_each_participant")) == "done":
            fanned += 1
            assert count == REVIEWERS, e
    # verdicts of round N are deleted only by a newer round
    newest: dict[tuple[str, str], int] = {}
    for e in entries:
        pair = (e["task_id"], e["step_id"])
        newest[pair] = max(newest.get(pair, 0), e["entry_seq"])
    lost = []
    recorded = 0
    verdicts = tmp / "verdicts.log"
    for line in verdicts.read_text().splitlines() if verdicts.exists() else []:
        parts = line.split()
        if len(parts) != 4 or parts[3] == "None":
            continue  # a line cut by a kill, or a verdict before the first entry
        decision, task, step, seq = parts
        recorded += 1
        if decision not in decisions and newest[(task, step)] <= int(seq):
            lost.append(line)
    assert lost == []
    # no run left claimed; the agents' counts of claimed runs agree
    assert [r["id"] for r in runs if r["status"] == "claimed"] == []
    assert set(profiles.values()) == {0}
    # no run executed to its end twice by workers that were never killed
    ends: Counter[str] = Counter()
    agents_log = tmp / "agents.log"
    for line in agents_log.read_text().splitlines() if agents_log.exists() else []:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "end" and int(parts[2]) not in cast.killed_pids:
            ends[parts[1]] += 1
    assert [run for run, n in ends.items() if n > 1] == []
    statuses = Counter(r["status"] for r in runs)
    return {
        "database": board.url.split(":", 1)[0],
        "seconds": SECONDS,
        "kills": dict(cast.kills),
        "kills_total": sum(cast.kills.values()),
        "entries": len(entries),
        "review_entries": len(review_entries),
        "review_entries_fanned_out": fanned,
        "runs": len(runs),
        "runs_by_status": dict(statuses),
        "verdicts_recorded": recorded,
        "verdicts_lost": len(lost),
        "recover": recovered,
    }
