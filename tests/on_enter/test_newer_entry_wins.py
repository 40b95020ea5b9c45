"""Issue "Many processes, one board", item 7: newer entries win, live as in recovery. An entry's
durable effect commits only while that entry is still the task's current occupancy of its step,
decided in the effect's own transaction; otherwise the position settles skipped(superseded) or
skipped(step_left), as the recovery scan's AC-B9 (a1)/(a2) would.

Before this, six threads moving tasks in one host lost data: an older Review entry's
clear_decisions ran after the next entry had begun and deleted reviewer verdicts recorded for
the new round. Here the interleaving is forced with a fault point that waits."""

from __future__ import annotations

import threading
from typing import Any

from core import faults
from tests.conftest import open_host
from tests.on_enter.conftest import CLEAR, FAN_OUT, Office, decision_ids, entries, raw

WAIT_S = 30


def _in_thread(target: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_older_entry_held_at_its_claim_does_not_clear_the_newer_rounds_verdict(
    office: Office,
) -> None:
    with open_host(office.url) as host:
        pause = faults.pause_at("dispatch.before_claim")
        try:
            older, errors = _in_thread(lambda: host.tasks.move(office.task, "Review"))
            assert pause.reached.wait(WAIT_S)  # entry 1 committed, its clear not yet claimed
            host.tasks.move(office.task, "Work")
            host.tasks.move(office.task, "Review")  # entry 2: clear + fan-out run in full
            verdict = host.decisions.record(office.task, "Review", office.seats[0], "approved")
        finally:
            pause.release()
        older.join(WAIT_S)
        assert not older.is_alive()
        assert errors == []

    with raw(office.url) as conn:
        kept = decision_ids(conn, office.task, office.review)
        review = [e for e in entries(conn, office.task) if e["step_id"] == office.review]
    assert kept == {verdict["decision"].id}
    assert [(e["entry_seq"], e["terminal"]) for e in review] == [(1, True), (2, True)]
    first, second = review
    assert first["markers"] == [
        (0, CLEAR, "skipped", "superseded"),
        (1, FAN_OUT, "skipped", "superseded"),
    ]
    assert [(p, k, s) for p, k, s, _ in second["markers"]] == [
        (0, CLEAR, "done"),
        (1, FAN_OUT, "done"),
    ]


def test_older_entry_whose_task_left_the_step_settles_step_left(office: Office) -> None:
    with open_host(office.url) as host:
        pause = faults.pause_at("dispatch.before_claim")
        try:
            older, errors = _in_thread(lambda: host.tasks.move(office.task, "Review"))
            assert pause.reached.wait(WAIT_S)
            host.tasks.move(office.task, "Work")  # Work declares no durable kind
        finally:
            pause.release()
        older.join(WAIT_S)
        assert errors == []
    with raw(office.url) as conn:
        (review,) = [e for e in entries(conn, office.task) if e["step_id"] == office.review]
    assert review["terminal"] is True
    assert review["markers"] == [
        (0, CLEAR, "skipped", "step_left"),
        (1, FAN_OUT, "skipped", "step_left"),
    ]
