"""Issue "Many processes, one board", tests: two hosts in two processes racing one entry; a
marker of a live epoch never re-claimed, a dead one's always; a poison run ends `dead`.
Each other process is a real one; a dead one was killed with SIGKILL."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from core import entry, ledger
from plugins.testing.logs import captured
from tests.conftest import open_host, wait_for_dead_processes
from tests.multiprocess.conftest import Board, child_env
from tests.on_enter.conftest import (
    CLEAR,
    FAN_OUT,
    Office,
    add_decision,
    add_entry,
    add_marker,
    build_office,
    decision_ids,
    digest_of,
    entries,
    on_enter,
    place,
    raw,
    run_rows,
)

pytestmark = pytest.mark.slow

# A second host process: opens a host (its recovery scan races ours), prints its epoch and
# recovery report and every WARNING+ record as JSON lines, then holds until stdin closes.
HOST = textwrap.dedent(
    """
    import json, sys
    from loguru import logger
    from core import Host
    from core.plugin.selection import PluginSelection

    logger.enable("")
    logger.remove()
    logger.add(lambda m: print(json.dumps({"level": m.record["level"].name,
                                           "extra": m.record["extra"]}, default=str),
                               flush=True), level="WARNING")
    host = Host.open(sys.argv[1], plugins=PluginSelection(allow=frozenset({"kanban", "office"})))
    print(json.dumps({"epoch": host.epoch, "report": host.recovery_report.as_dict()}), flush=True)
    sys.stdin.readline()
    host.close()
    """
)


def _host_process(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOST, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


def _opened(proc: subprocess.Popen[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The process's opening line and the WARNING+ records it printed before it."""
    assert proc.stdout is not None
    problems = []
    while True:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "process ended"
        value = json.loads(line)
        if "epoch" in value:
            return value, problems
        problems.append(value)


def _pending(office: Office, task_id: str) -> str:
    with raw(office.url) as conn:
        place(conn, task_id, office.review)
        return add_entry(conn, task_id, office.review, 1, digest_of(on_enter(conn, office.review)))


def test_two_host_processes_racing_recovery_of_the_same_entries_run_each_position_once(
    db_url: str,
) -> None:
    """Two processes start at once over ten pending Review entries (clear_decisions, then the
    fan-out to three reviewers): every position runs once in all (one clear, three runs per
    entry), every entry ends terminal, and neither process logs a WARNING or ERROR."""
    office = build_office(db_url, tasks=10)
    seeded = {}
    for task in office.tasks:
        _pending(office, task)
        with raw(db_url) as conn:
            seeded[task] = add_decision(conn, task, office.review, office.seats[0])
    procs = [_host_process(db_url) for _ in range(2)]
    try:
        opened = [_opened(p) for p in procs]
    finally:
        for p in procs:
            p.communicate("\n", timeout=60)
    assert [problems for _line, problems in opened] == [[], []]
    reports = [line["report"] for line, _ in opened]
    assert sum(r["redispatched"] for r in reports) >= 10
    with raw(db_url) as conn:
        for task in office.tasks:
            (found,) = entries(conn, task)
            assert found["terminal"] is True
            assert [(p, k, s) for p, k, s, _ in found["markers"]] == [
                (0, CLEAR, "done"),
                (1, FAN_OUT, "done"),
            ]
            assert decision_ids(conn, task, office.review) == set()
            assert sorted(r["agent_profile_id"] for r in run_rows(conn, task)) == sorted(
                office.reviewers
            )


def test_a_live_epochs_marker_is_never_reclaimed_a_dead_ones_always_is(db_url: str) -> None:
    office = build_office(db_url)
    holder = _host_process(db_url)
    try:
        line, _ = _opened(holder)
        live = line["epoch"]
        entry_id = _pending(office, office.task)
        with raw(db_url) as conn:
            add_marker(conn, entry_id, 0, CLEAR, "in_progress", epoch=live)
            kept = add_decision(conn, office.task, office.review, office.seats[0])
        with open_host(db_url) as host, captured() as records:
            task = host.tasks.get(office.task)
            _wf, step = host.workflows.step_by_id(office.review)
            with host.store.read() as conn:
                record = ledger.load_entry(conn, entry_id)
            assert record is not None
            assert entry.redispatch(host, task, step, record) == "abandoned"
            assert [r for r in records if r["level"] in ("WARNING", "ERROR")] == []
            with raw(db_url) as conn:
                (found,) = entries(conn, office.task)
                assert found["markers"] == [(0, CLEAR, "in_progress", None)]
                assert decision_ids(conn, office.task, office.review) == {kept}

            holder.kill()  # SIGKILL: no close, no cleanup
            holder.wait(10)
            wait_for_dead_processes(db_url)

            assert entry.redispatch(host, task, step, record) == "completed"
        with raw(db_url) as conn:
            (found,) = entries(conn, office.task)
            assert found["terminal"] is True
            assert decision_ids(conn, office.task, office.review) == set()
            assert len(run_rows(conn, office.task)) == 3
    finally:
        holder.kill()
        holder.wait(10)


def test_a_poison_run_ends_dead_after_max_attempts(db_url: str, tmp_path: Path) -> None:
    """A run whose agent kills its worker every time is retried until it has died with its
    worker max_attempts (3) times, then marked dead with an ERROR naming it, never again run."""
    board = Board(db_url, tmp_path)
    board.json("init")
    starts = tmp_path / "starts.log"
    script = tmp_path / "poison.py"
    script.write_text(
        "import os, signal, sys\n"
        "sys.stdin.read()\n"
        f"open({str(starts)!r}, 'a').write(os.environ['LANEWAY_RUN_ID'] + '\\n')\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n"
    )
    board.json("workflow", "create", "--template", "simple")
    board.json("profile", "add", "poison", "--command", f"{sys.executable} {script}")
    task = board.json("task", "create", "--workflow", "Kanban", "--title", "t", "--step", "Backlog")
    board.json("participant", "add", "--workflow", "Kanban", "--step", "Backlog",
               "--role", "runner", "--profile", "poison")  # fmt: skip
    board.json("task", "start", task["id"], "--step", "Backlog")
    (run,) = board.json("runs", "list", "--task", task["id"])
    dead_records: list[dict[str, Any]] = []
    for _ in range(8):
        done = board.run("--log-json", "worker", "--once")
        wait_for_dead_processes(db_url)
        for text in done.stderr.splitlines():
            try:
                record = json.loads(text)
            except ValueError:
                continue
            extra = record.get("record", {}).get("extra", {})
            if (
                record.get("record", {}).get("level", {}).get("name") == "ERROR"
                and extra.get("run_id") == run["id"]
            ):
                dead_records.append(extra)
        (now,) = board.json("runs", "list", "--task", task["id"])
        if now["status"] == "dead":
            break
    assert now["status"] == "dead"
    assert now["attempts"] == 3
    assert starts.read_text().splitlines() == [run["id"]] * 3
    assert len(dead_records) == 1
    assert dead_records[0]["attempts"] == 3
    # Never again: a further worker leaves it alone.
    assert board.json("worker", "--once") == {"claimed": 0, "finished": 0, "failed": 0}
    assert starts.read_text().splitlines() == [run["id"]] * 3
