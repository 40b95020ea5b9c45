"""Office switched on and off while several threads move tasks through Office and kanban
kinds: no thread sees an exception, every entry ends terminal with each durable position done
or skipped(no_executor), every skip has its WARNING, and each entry ran on one bundle (its
Office positions are all done or all skipped, never a mix)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from plugins.testing.arrivals import action
from plugins.testing.logs import LogRecord, matching
from tests.hosts.conftest import WAIT_S, open_with

pytestmark = pytest.mark.slow

MOVERS = 4
TASKS_PER_MOVER = 2
ROUNDS = 4
STEPS = ("A", "B", "C")
OFFICE_KINDS = ("clear_decisions", "ensure_participant_seat", "queue_run_for_each_participant")
NO_EXECUTOR = "action kind has no executor in this configuration; skipped"


def _document() -> str:
    import yaml

    on_enter = [
        action("clear_decisions"),
        action("ensure_participant_seat", {"role": "reviewer", "agent_profile_id": "reviewer"}),
        action("queue_run_for_each_participant", {"role": "reviewer"}),
        action("set_session_mode", {"mode": "busy"}),
    ]
    steps = [
        {"name": name, "position": i, "is_start_step": i == 0, "events": {"on_enter": on_enter}}
        for i, name in enumerate(STEPS)
    ]
    doc = {"version": 1, "type": "kandev_workflow", "workflows": [{"name": "Load", "steps": steps}]}
    return yaml.safe_dump(doc, sort_keys=False)


def test_toggling_office_while_threads_move_tasks(
    db_url: str, tmp_path: Path, laneway_logs: list[LogRecord]
) -> None:
    path = tmp_path / "load.yml"
    path.write_text(_document())
    with open_with(db_url) as host:
        host.profiles.add("reviewer", command=["true"], role="reviewer")
        (wf,) = host.workflows.import_file(path)
        tasks = [
            [
                host.tasks.create(workflow=wf.id, title=f"m{m}-t{n}").id
                for n in range(TASKS_PER_MOVER)
            ]
            for m in range(MOVERS)
        ]
        for task_id in (t for mine in tasks for t in mine):
            host.sessions.start(task_id)

        errors: list[BaseException] = []
        movers_done = threading.Event()
        toggles = Counter[bool]()
        start = threading.Barrier(MOVERS + 1)

        def mover(mine: list[str]) -> None:
            try:
                start.wait(WAIT_S)
                for n in range(ROUNDS):
                    for step in (*STEPS[1:], STEPS[0]):
                        for task_id in mine:
                            host.tasks.move(task_id, step)
                    del n
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                errors.append(exc)

        def toggler() -> None:
            try:
                start.wait(WAIT_S)
                office = True
                while not movers_done.is_set():
                    office = not office
                    host.set_features(office=office)
                    toggles[office] += 1
                    time.sleep(0.002)
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                errors.append(exc)

        threads = [threading.Thread(target=mover, args=(mine,)) for mine in tasks]
        switcher = threading.Thread(target=toggler)
        for thread in (*threads, switcher):
            thread.start()
        for thread in threads:
            thread.join(120)
        movers_done.set()
        switcher.join(WAIT_S)

        assert not any(t.is_alive() for t in (*threads, switcher)), "a thread is stuck"
        assert errors == []
        assert toggles[True] > 0, "the features never switched"
        assert toggles[False] > 0, "the features never switched"

        entries = [
            (entry, markers)
            for task_id in (t for mine in tasks for t in mine)
            for entry, markers in host.entries.list(task=task_id)
        ]
        arrivals = MOVERS * TASKS_PER_MOVER * ROUNDS * len(STEPS)
        assert len(entries) == arrivals
        assert [e.id for e, _m in entries if not e.terminal] == []
        outcomes = Counter[str]()
        skipped_positions = set()
        for entry, markers in entries:
            found = {(m.kind, m.state, m.reason) for m in markers}
            assert {m.kind for m in markers} == set(OFFICE_KINDS), entry
            # one bundle per entry: all done, or all skipped for want of an executor
            assert found in (
                {(k, "done", None) for k in OFFICE_KINDS},
                {(k, "skipped", "no_executor") for k in OFFICE_KINDS},
            ), (entry, found)
            outcomes["done" if ("clear_decisions", "done", None) in found else "skipped"] += 1
            if ("clear_decisions", "skipped", "no_executor") in found:
                skipped_positions |= {(entry.id, m.position) for m in markers}

    assert outcomes["done"] > 0, outcomes
    assert outcomes["skipped"] > 0, outcomes
    warned = {
        (r["extra"]["entry_id"], r["extra"]["position"])
        for r in matching(laneway_logs, "WARNING", feature="office")
        if r["message"] == NO_EXECUTOR
    }
    assert warned == skipped_positions
    assert matching(laneway_logs, "ERROR") == []
