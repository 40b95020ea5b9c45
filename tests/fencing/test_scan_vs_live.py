"""Issue 27 item 5: the startup recovery scan resumes only what dead epochs left (CLI.md).

An entry records the epoch dispatching it (`step_entries.epoch`, the mover's). A process that
opens while another is still between an arrival's commit and its first claim leaves the entry to
that process: it runs nothing of it, and the entry's sequence keeps the order the live
dispatcher gives it. Once the dispatcher is dead, the next scan resumes it. Fails on the main
this branch started from, where the second host's scan took the entry over.
"""

from __future__ import annotations

import threading

import sqlalchemy as sa

from core import faults
from core.store import tables as t
from tests.conftest import open_host
from tests.on_enter.conftest import CLEAR, FAN_OUT, Office, entries, raw, run_rows

WAIT_S = 30.0


def test_item5_a_scan_leaves_an_entry_its_live_dispatcher_has_not_claimed_yet(
    office: Office,
) -> None:
    """Item 5: host A's dispatch of the Review entry is held before its first claim; host B
    opens meanwhile (its scan): B takes nothing (redispatched 0, no run, no marker), and A then
    runs the entry in full under its own epoch, its runs queued once."""
    with open_host(office.url) as a:
        pause = faults.pause_at("dispatch.before_claim")
        errors: list[BaseException] = []

        def move() -> None:
            try:
                a.tasks.move(office.task, "Review")
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        mover = threading.Thread(target=move)
        mover.start()
        try:
            assert pause.reached.wait(WAIT_S)  # the entry committed, nothing claimed yet
            with raw(office.url) as conn:
                (pending,) = [e for e in entries(conn, office.task) if not e["terminal"]]
                epoch = conn.execute(
                    sa.select(t.step_entries.c.epoch).where(t.step_entries.c.id == pending["id"])
                ).scalar()
            assert epoch == a.epoch
            with open_host(office.url) as b:
                report = b.recovery_report.as_dict()
            with raw(office.url) as conn:
                taken = run_rows(conn, office.task)
                (still,) = [e for e in entries(conn, office.task) if e["id"] == pending["id"]]
        finally:
            pause.release()
        mover.join(WAIT_S)
        assert not mover.is_alive()
        assert errors == []
        assert (report["scanned"], report["redispatched"]) == (1, 0)
        assert taken == []
        assert (still["terminal"], still["markers"]) == (False, [])
        epoch_a = a.epoch

    with raw(office.url) as conn:
        (done,) = entries(conn, office.task)
        queued = run_rows(conn, office.task)
        markers = conn.execute(
            sa.select(t.step_entry_markers.c.kind, t.step_entry_markers.c.epoch).where(
                t.step_entry_markers.c.entry_id == done["id"]
            )
        ).all()
    assert done["terminal"] is True or done["terminal"] == 1
    assert sorted(r["agent_profile_id"] for r in queued) == sorted(office.reviewers)
    assert sorted(markers) == sorted([(CLEAR, epoch_a), (FAN_OUT, epoch_a)])


def test_item5_an_entry_whose_dispatcher_died_is_resumed_by_the_next_scan(office: Office) -> None:
    """Item 5, the other half: an entry whose epoch is dead (its row names an epoch nobody
    holds) is resumed by the next host's scan, which makes the entry its own."""
    with open_host(office.url) as a:
        a.tasks.move(office.task, "Work")  # no entry there: Work has no durable on_enter
    with raw(office.url) as conn:
        conn.execute(
            sa.update(t.tasks)
            .where(t.tasks.c.id == office.task)
            .values(workflow_step_id=office.review)
        )
        conn.execute(
            sa.insert(t.step_entries).values(
                id="e-dead",
                task_id=office.task,
                step_id=office.review,
                entry_seq=1,
                entry_path="E2",
                declaration_digest=_digest(conn, office.review),
                terminal=False,
                created_at="2026-01-01T00:00:00.000000Z",
                epoch="dead0000dead0000dead0000dead0000",
            )
        )
    with open_host(office.url) as b:
        report = b.recovery_report.as_dict()
        epoch_b = b.epoch
    assert (report["scanned"], report["redispatched"]) == (1, 1)
    with raw(office.url) as conn:
        owner = conn.execute(
            sa.select(t.step_entries.c.epoch).where(t.step_entries.c.id == "e-dead")
        ).scalar()
        queued = run_rows(conn, office.task)
    assert owner == epoch_b
    assert sorted(r["agent_profile_id"] for r in queued) == sorted(office.reviewers)


def _digest(conn: sa.Connection, step_id: str) -> str:
    from tests.on_enter.conftest import digest_of, on_enter

    return digest_of(on_enter(conn, step_id))
