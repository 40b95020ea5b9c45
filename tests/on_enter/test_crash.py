"""Real crashes (spec on-enter-action-dispatch AC-B2, AC-B5, AC-B6, AC-B9, AC-A1; CLI.md fault
points): a child process moves an Office task Work -> Review and dies with `os._exit(99)` at a
named commit boundary (`LANEWAY_FAULT=<point>[@N]`). The test process then opens a host on the
same database - a restart: new epoch, recovery scan at open - and asserts the entry's durable
effects happened exactly once: one run per reviewer, the decisions seeded before the move
deleted once (and a decision recorded afterwards never deleted by a later start), and the entry
terminal with both markers done.

Each case first asserts the shape the crash left, so a fault point that moved or stopped
firing fails loudly instead of degrading into a plain no-crash test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from core import Host
from tests.conftest import open_host, wait_for_dead_processes
from tests.on_enter.conftest import (
    CLEAR,
    FAN_OUT,
    Office,
    add_decision,
    build_office,
    decision_ids,
    entries,
    raw,
    run_rows,
)

pytestmark = pytest.mark.slow

EXIT_STATUS = 99

DRIVER = """
import sys
from core import Features, Host
from core.plugin.selection import PluginSelection

url, task_id = sys.argv[1], sys.argv[2]
selection = PluginSelection(allow=frozenset({"kanban", "office"}))
with Host.open(url, features=Features(office=True), plugins=selection) as host:
    host.tasks.move(task_id, "Review")
"""

SEEDED, NONE = "seeded", "none"
DONE = [(0, CLEAR, "done", None), (1, FAN_OUT, "done", None)]

# point -> the shape the crash leaves: (markers, decisions seeded before the move, runs)
CRASH_SHAPES: dict[str, tuple[list[Any], str, int]] = {
    # the step change and the entry record committed; nothing dispatched
    "transition.after_commit": ([], SEEDED, 0),
    # clear_decisions claimed inside the transaction it shares with the fan-out (issue 14:
    # consecutive transactional kinds commit together), which dies uncommitted
    "dispatch.after_claim@1": ([], SEEDED, 0),
    # the clear's DELETE and done marker written, the fan-out claimed, all in that one
    # transaction, which dies uncommitted: no marker, no run, the decision still there
    "dispatch.after_claim@2": ([], SEEDED, 0),
    # the clear's and the fan-out's effects and done markers written, the transaction dies
    # before COMMIT: all gone, the decision still there
    "fan_out.before_commit": ([], SEEDED, 0),
    # the DELETE ran inside the clear's transaction, which dies before COMMIT
    "clear_decisions.before_commit": ([], SEEDED, 0),
}


@pytest.fixture
def board(db_url: str) -> tuple[Office, str]:
    """Office Default, three reviewers, a task at Work, and a decision recorded at Review
    before the move (the previous round's vote, which the entry's clear must delete)."""
    office = build_office(db_url)
    with raw(db_url) as conn:
        seeded = add_decision(conn, office.task, office.review, office.seats[0])
    return office, seeded


def _child_env(fault: str | None) -> dict[str, str]:
    env = {**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office"}
    env.pop("LANEWAY_PLUGINS_BLOCK", None)
    env.pop("LANEWAY_FAULT", None)
    if fault is not None:
        env["LANEWAY_FAULT"] = fault
    return env


def _run(argv: list[str], fault: str | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env=_child_env(fault),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextmanager
def _restart(url: str) -> Iterator[Host]:
    """Open a host after the crash. A killed PostgreSQL client's advisory lock is released
    when the server notices the dropped connection, which can lag the child's exit a little;
    until then its epoch is (rightly) still live and its markers are not re-claimed."""
    wait_for_dead_processes(url)
    host = open_host(url)
    with host:
        yield host


def _assert_crash_shape(office: Office, seeded: str, point: str) -> None:
    markers, decisions, runs = CRASH_SHAPES[point]
    with raw(office.url) as conn:
        (entry,) = entries(conn, office.task)
        assert entry["markers"] == markers
        assert entry["terminal"] is False
        assert entry["step_id"] == office.review
        left = decision_ids(conn, office.task, office.review)
        assert left == ({seeded} if decisions == SEEDED else set())
        assert len(run_rows(conn, office.task)) == runs
        # issue 14: the fan-out's runs and its marker commit together or not at all
        fan_out_marked = any(kind == FAN_OUT for _pos, kind, _state, _reason in entry["markers"])
        assert fan_out_marked == (runs > 0)


def _assert_exactly_once(office: Office, seeded: str) -> None:
    """After recovery: one run per reviewer, the seeded decision gone, the entry closed; then
    a decision recorded after recovery survives every later start."""
    with _restart(office.url) as host:
        report = host.recovery_report.as_dict()
        assert report["errors"] == 0
        assert host.tasks.get(office.task).workflow_step_id == office.review
        with raw(office.url) as conn:
            runs = run_rows(conn, office.task)
            assert decision_ids(conn, office.task, office.review) == set()
            (entry,) = entries(conn, office.task)
        assert sorted(r["agent_profile_id"] for r in runs) == sorted(office.reviewers)
        assert {r["workflow_step_id"] for r in runs} == {office.review}
        assert {r["reason"] for r in runs} == {"review_started"}
        assert entry["terminal"] is True
        assert entry["markers"] == DONE
        recorded = host.decisions.record(office.task, "Review", office.seats[1], "approved")
        kept = recorded["decision"].id
        assert recorded["transitioned"] is False

    with _restart(office.url) as host:
        assert host.recovery_report.as_dict() == {
            "scanned": 0,
            "redispatched": 0,
            "skipped": {},
            "errors": 0,
        }
    with raw(office.url) as conn:
        assert decision_ids(conn, office.task, office.review) == {kept}
        assert {r["id"] for r in run_rows(conn, office.task)} == {r["id"] for r in runs}


@pytest.mark.parametrize("point", list(CRASH_SHAPES))
def test_ac_b2_ac_b9_crash_at_fault_point_recovers_exactly_once(
    board: tuple[Office, str], point: str, tmp_path: Path
) -> None:
    """AC-B2 / AC-B5 / AC-B6 / AC-B9 at each fault point: the child dies with status 99 where
    the point says; recovery at the next open completes the entry exactly once. The fan-out's
    runs and marker are both present or both absent at every point (issue 14: they commit in
    one transaction), so recovery runs an uncommitted fan-out afresh; for the clear's points
    the uncommitted DELETE is re-run (AC-B2: in_progress or absent proves no delete
    committed)."""
    office, seeded = board
    child = _run([sys.executable, "-c", DRIVER, office.url, office.task], point, tmp_path)
    assert child.returncode == EXIT_STATUS, child.stderr
    assert "Traceback" not in child.stderr

    _assert_crash_shape(office, seeded, point)
    _assert_exactly_once(office, seeded)


def test_issue14_fan_out_never_reaches_dispatch_after_effect(
    board: tuple[Office, str], tmp_path: Path
) -> None:
    """Issue 14 / CLI.md fault points: the fan-out commits its runs with its done marker, so an
    Office Review arrival never reaches dispatch.after_effect (which applies only to kinds that
    commit their effect apart): armed with it, the child is not killed, and the runs and both
    markers are there, exactly once."""
    office, seeded = board
    point = "dispatch.after_effect"
    child = _run([sys.executable, "-c", DRIVER, office.url, office.task], point, tmp_path)
    assert child.returncode == 0, child.stderr
    with raw(office.url) as conn:
        (entry,) = entries(conn, office.task)
        assert entry["markers"] == DONE
        assert entry["terminal"] is True
        assert len(run_rows(conn, office.task)) == len(office.reviewers)
    _assert_exactly_once(office, seeded)


def test_driver_without_fault_completes_the_entry(
    board: tuple[Office, str], tmp_path: Path
) -> None:
    """Control for the crash cases: the same driver with no fault armed exits 0 and leaves the
    end state the recovered cases must reach (AC-A1: each durable action once)."""
    office, seeded = board
    child = _run([sys.executable, "-c", DRIVER, office.url, office.task], None, tmp_path)
    assert child.returncode == 0, child.stderr
    with raw(office.url) as conn:
        (entry,) = entries(conn, office.task)
        assert seeded not in decision_ids(conn, office.task, office.review)
    assert entry["terminal"] is True
    _assert_exactly_once(office, seeded)


def _laneway_command() -> list[str] | None:
    """The `laneway` console script of this interpreter's environment, if it works."""
    beside = Path(sys.executable).with_name("laneway")
    found = str(beside) if beside.exists() else shutil.which("laneway")
    if found is None:
        return None
    probe = subprocess.run([found, "--help"], capture_output=True, timeout=60, check=False)
    return [found] if probe.returncode == 0 else None


def test_cli_task_move_killed_inside_the_fan_out_recovers_exactly_once(
    board: tuple[Office, str], tmp_path: Path
) -> None:
    """AC-B2 / AC-B9 through the command line: `laneway --db URL task move T Review` dies at
    fan_out.before_commit (the clear and the fan-out written with their done markers, not
    committed): none of it survives, the next open runs both afresh, and the entry ends
    exactly once."""
    command = _laneway_command()
    if command is None:
        pytest.skip("the `laneway` command is not installed (or `laneway --help` fails)")
    office, seeded = board
    point = "fan_out.before_commit"
    child = _run(
        [*command, "--db", office.url, "task", "move", office.task, "Review"], point, tmp_path
    )
    assert child.returncode == EXIT_STATUS, child.stderr
    assert "Traceback" not in child.stderr

    _assert_crash_shape(office, seeded, point)
    _assert_exactly_once(office, seeded)


def test_decision_recorded_between_the_arrival_and_its_clear_is_cleared_with_the_old_round(
    board: tuple[Office, str], tmp_path: Path
) -> None:
    """docs/guarantees.md ("The clear's commit is the line between rounds"): the mover dies
    after the arrival commits and before the clear runs; a decision recorded in that window
    (here written as a process that opened before the crash, such as `laneway serve`, records
    it: straight into the table, with no recovery of its own) falls before the clear's line, so
    the recovery that runs the clear deletes it with the old round's. A decision recorded after
    recovery is kept (`_assert_exactly_once`)."""
    office, seeded = board
    point = "transition.after_commit"
    child = _run([sys.executable, "-c", DRIVER, office.url, office.task], point, tmp_path)
    assert child.returncode == EXIT_STATUS, child.stderr
    _assert_crash_shape(office, seeded, point)
    with raw(office.url) as conn:
        in_window = add_decision(conn, office.task, office.review, office.seats[2])
        assert decision_ids(conn, office.task, office.review) == {seeded, in_window}
    _assert_exactly_once(office, seeded)
