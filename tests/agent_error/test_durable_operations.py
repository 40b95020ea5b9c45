"""AC-C5 made durable (issue 9 item 5): one failure dispatches on_agent_error once, however many
processes report it, and across restarts, on SQLite and PostgreSQL.

- two real `laneway agent fail` processes report the same failure one after the other;
- two stores race claims of the same operation ids on the database itself;
- two writer hosts race one failure.
"""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from core.operations import Operations
from core.store.database import Store
from tests.agent_error.helpers import Probe, World, open_world_host, probe
from tests.agents.conftest import laneway

pytestmark = pytest.mark.slow

# Doing and Triage each send the task to the other on an agent error: a failure dispatched
# twice would be seen as the task back at Doing.
PING_PONG = textwrap.dedent(
    """\
    id: ping
    name: Ping pong
    steps:
      - id: doing
        name: Doing
        position: 0
        is_start_step: true
        events:
          on_agent_error: [{type: move_to_step, config: {step_id: triage}}]
      - id: triage
        name: Triage
        position: 1
        events:
          on_agent_error: [{type: move_to_step, config: {step_id: doing}}]
    """
)


def _json(*args: str, cwd: Path) -> Any:
    proc = laneway("--json", *args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_ac_c5_the_same_failure_from_two_laneway_processes_dispatches_once(
    db_url: str, tmp_path: Path
) -> None:
    """AC-C5 across processes: `laneway agent fail` run twice for one failure (same session,
    same execution id), each a process of its own with its own epoch: the first dispatches
    (Doing -> Triage), the second is idempotent (`dispatched: false`, the task stays at
    Triage; a second dispatch would have run Triage's own on_agent_error move back to
    Doing). A different execution id is a different failure (AC-C4) and dispatches."""
    board = tmp_path / "triage.yml"
    board.write_text(PING_PONG)
    db = ["--db", db_url]
    _json(*db, "init", cwd=tmp_path)
    (wf,) = _json(*db, "workflow", "import", str(board), cwd=tmp_path)
    steps = {s["name"]: s["id"] for s in wf["steps"]}
    task = _json(*db, "task", "create", "--workflow", wf["id"], "--title", "t", cwd=tmp_path)["id"]
    session = _json(*db, "session", "start", task, cwd=tmp_path)["id"]
    fail = [*db, "agent", "fail", task, "--session", session, "--execution", "ex-1"]

    first = _json(*fail, cwd=tmp_path)
    second = _json(*fail, cwd=tmp_path)

    operation = f"agent_error:session:{session}:ex-1"
    assert first == {"dispatched": True, "operation_id": operation}
    assert {k: second[k] for k in ("dispatched", "operation_id")} == {
        "dispatched": False,
        "operation_id": operation,
    }
    assert "handled before" in second["reason"]  # the JSON says why nothing was dispatched
    assert _json(*db, "task", "show", task, cwd=tmp_path)["workflow_step_id"] == steps["Triage"]
    other = _json(
        *db, "agent", "fail", task, "--session", session, "--execution", "ex-2", cwd=tmp_path
    )
    assert other["dispatched"] is True
    assert _json(*db, "task", "show", task, cwd=tmp_path)["workflow_step_id"] == steps["Doing"]


def test_ac_c5_racing_claims_of_one_operation_on_the_database_one_wins(db_url: str) -> None:
    """AC-C5: the claim is one conditional INSERT whose row count decides. Two stores (two
    connections, as two processes have) claim the same 50 operation ids at the same time,
    each under its own live epoch: every id is claimed exactly once."""
    from core import Host

    Host.open(db_url).close()  # the schema
    stores = [Store(db_url), Store(db_url)]
    ops = [
        Operations(store, lambda n=n: f"epoch-{n}", is_dead=lambda _epoch: False)
        for n, store in enumerate(stores)
    ]
    ids_ = [f"agent_error:session:s:{n}" for n in range(50)]
    won: list[list[str]] = [[], []]
    start = threading.Barrier(2)

    def claimer(n: int) -> None:
        start.wait()
        for op in ids_:
            if ops[n].claim(op):
                won[n].append(op)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for store in stores:
        store.close()
    assert sorted(won[0] + won[1]) == sorted(ids_)
    assert not set(won[0]) & set(won[1])


def test_ac_c5_two_writer_hosts_racing_one_failure_dispatch_it_once(
    db_url: str, tmp_path: Path
) -> None:
    """AC-C5 with two live writer hosts on one database: both deliver the same failure at
    once; exactly one runs the step's actions, the other is idempotent (silently)."""
    files = tmp_path / "files"
    files.mkdir()
    probes = [Probe(), Probe()]
    first = open_world_host(db_url, probes[0])
    try:
        second = open_world_host(db_url, probes[1])
        try:
            world = World(first, probes[0], files, db_url)
            wf = world.board([probe("recover")])
            task = world.task(wf)
            session = world.session(task, world.scripted("a", "worker"))
            failure = world.failure(task, session, agent_execution_id="exec-1")
            start = threading.Barrier(2)

            def deliver(host: Any) -> None:
                start.wait()
                host.runtime.fail_and_dispatch(failure)

            threads = [threading.Thread(target=deliver, args=(h,)) for h in (first, second)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            ran = len(probes[0].on_agent_error()) + len(probes[1].on_agent_error())
            assert ran == 1
        finally:
            second.close()
    finally:
        first.close()
