"""The startup recovery scan (spec on-enter-action-dispatch AC-B9, with AC-B2, AC-B5, AC-B6,
AC-B8, AC-C2 and AC-F1 where recovery is what exercises them).

Each test puts the entry ledger into the shape a crash leaves behind by writing `step_entries`
and `step_entry_markers` rows directly (tests.on_enter.conftest), then opens a fresh host: a
new `Host` is a restart - a new epoch, the scan at open - sharing only the durable state. The
assertions are on rows (entries, markers, decisions, runs) and on structured log fields.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import core.entry
from core import ledger, recovery, recovery_close
from core.store import tables as t
from tests.conftest import open_host
from tests.on_enter.conftest import (
    CLEAR,
    DEAD_EPOCH,
    FAN_OUT,
    Office,
    add_decision,
    add_entry,
    add_marker,
    build_office,
    decision_ids,
    digest_of,
    entries,
    marker_rows,
    on_enter,
    place,
    raw,
    records,
    run_rows,
    set_on_enter,
)

REVIEWER_FAN_OUT = {"type": FAN_OUT, "config": {"role": "reviewer", "reason": "review_started"}}
CLEAR_DECL = {"type": CLEAR, "config": {}}


def _pending_at_review(
    conn: sa.Connection, office: Office, task_id: str | None = None, seq: int = 1
) -> str:
    """The task standing at Review with a non-terminal entry for it and no marker yet."""
    task_id = task_id or office.task
    place(conn, task_id, office.review)
    return add_entry(conn, task_id, office.review, seq, digest_of(on_enter(conn, office.review)))


def _restart(url: str) -> tuple[dict[str, Any], str]:
    """Open (and close) a fresh host: its recovery report and its epoch."""
    with open_host(url) as host:
        assert host.epoch is not None
        return host.recovery_report.as_dict(), host.epoch


def _reviewers_with_runs(conn: sa.Connection, task_id: str) -> list[str]:
    return sorted(r["agent_profile_id"] for r in run_rows(conn, task_id))


DONE_ENTRY = [(0, CLEAR, "done", None), (1, FAN_OUT, "done", None)]


# -- AC-B9: resume, re-claim -----------------------------------------------------------------------


def test_ac_b9_resumes_at_first_non_terminal_position(office: Office) -> None:
    """AC-B9 / AC-B5: position 0 (clear_decisions) done, position 1 absent. Recovery runs only
    the fan-out - one run per reviewer - and no second clear: a decision recorded after the
    committed clear survives."""
    with raw(office.url) as conn:
        entry_id = _pending_at_review(conn, office)
        add_marker(conn, entry_id, 0, CLEAR, "done")
        kept = add_decision(conn, office.task, office.review, office.seats[0])

    report, epoch = _restart(office.url)

    assert report == {"scanned": 1, "redispatched": 1, "skipped": {}, "errors": 0}
    with raw(office.url) as conn:
        assert decision_ids(conn, office.task, office.review) == {kept}
        assert _reviewers_with_runs(conn, office.task) == sorted(office.reviewers)
        (entry,) = entries(conn, office.task)
        markers = marker_rows(conn, entry_id)
    assert entry["terminal"] is True
    assert entry["markers"] == DONE_ENTRY
    assert markers[(0, CLEAR)]["epoch"] == DEAD_EPOCH  # a terminal marker is left alone
    assert markers[(1, FAN_OUT)]["epoch"] == epoch


def test_ac_b9_reclaims_in_progress_marker_of_another_epoch(office: Office) -> None:
    """AC-B9 / Execution model: a clear_decisions marker left in_progress by a dead epoch is
    re-claimed under the new epoch and re-run (AC-B2's precise form: marker and delete share a
    transaction, so in_progress proves the delete never committed) - then the fan-out runs."""
    with raw(office.url) as conn:
        entry_id = _pending_at_review(conn, office)
        add_marker(conn, entry_id, 0, CLEAR, "in_progress", epoch=DEAD_EPOCH)
        stale = add_decision(conn, office.task, office.review, office.seats[0])

    report, epoch = _restart(office.url)

    assert report["redispatched"] == 1
    with raw(office.url) as conn:
        assert stale not in decision_ids(conn, office.task, office.review)
        assert _reviewers_with_runs(conn, office.task) == sorted(office.reviewers)
        (entry,) = entries(conn, office.task)
        markers = marker_rows(conn, entry_id)
    assert entry["terminal"] is True
    assert entry["markers"] == DONE_ENTRY
    assert markers[(0, CLEAR)]["epoch"] == epoch


def test_ac_b2_replayed_fan_out_is_suppressed_by_its_idempotency_key(office: Office) -> None:
    """AC-B2 / AC-B4: a fan-out whose runs committed but whose marker was left in_progress by a
    dead epoch is replayed on recovery; the entry-scoped keys suppress every run, so each
    reviewer still has exactly one run, and the earlier committed clear is not repeated."""
    with open_host(office.url) as host:
        host.tasks.move(office.task, "Review")
    with raw(office.url) as conn:
        before = {r["id"] for r in run_rows(conn, office.task)}
        (entry,) = entries(conn, office.task)
        conn.execute(
            sa.update(t.step_entry_markers)
            .where(
                t.step_entry_markers.c.entry_id == entry["id"],
                t.step_entry_markers.c.position == 1,
            )
            .values(state="in_progress", epoch=DEAD_EPOCH)
        )
        conn.execute(
            sa.update(t.step_entries)
            .where(t.step_entries.c.id == entry["id"])
            .values(terminal=False)
        )
        kept = add_decision(conn, office.task, office.review, office.seats[1])

    report, _epoch = _restart(office.url)

    assert report["redispatched"] == 1
    with raw(office.url) as conn:
        assert {r["id"] for r in run_rows(conn, office.task)} == before
        assert len(before) == 3
        assert decision_ids(conn, office.task, office.review) == {kept}
        (after,) = entries(conn, office.task)
    assert after["terminal"] is True
    assert after["markers"] == DONE_ENTRY


def test_ac_f1_same_epoch_in_progress_marker_abandons_silently(
    office: Office, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F1 (the losing caller) / Execution model: an in_progress marker carrying this
    process's own epoch belongs to a live peer. The dispatcher neither re-claims nor executes,
    does not move on to later positions, and emits no WARNING or ERROR record."""
    with open_host(office.url) as host:
        assert host.epoch is not None
        with raw(office.url) as conn:
            entry_id = _pending_at_review(conn, office)
            add_marker(conn, entry_id, 0, CLEAR, "in_progress", epoch=host.epoch)
            kept = add_decision(conn, office.task, office.review, office.seats[0])
        task = host.tasks.get(office.task)
        _wf, step = host.workflows.step_by_id(office.review)
        with host.store.read() as conn:
            record = ledger.load_entry(conn, entry_id)
        assert record is not None
        laneway_logs.clear()

        assert core.entry.redispatch(host, task, step, record) == "abandoned"
        report = recovery.scan(host)  # the scan meeting the same marker: same outcome

        assert report.errors == 0
        assert not [r for r in laneway_logs if r["level"] in ("WARNING", "ERROR", "CRITICAL")]
        with raw(office.url) as conn:
            markers = marker_rows(conn, entry_id)
            assert decision_ids(conn, office.task, office.review) == {kept}
            assert run_rows(conn, office.task) == []
            (entry,) = entries(conn, office.task)
    assert list(markers) == [(0, CLEAR)]
    assert markers[(0, CLEAR)]["state"] == "in_progress"
    assert markers[(0, CLEAR)]["epoch"] == host.epoch
    assert entry["terminal"] is False


# -- AC-B9 (a)-(c) ---------------------------------------------------------------------------------


def test_ac_b9_a1_entry_the_task_left_is_skipped_step_left(office: Office) -> None:
    """AC-B9(a1): a non-terminal entry at Review while the task stands at Work is closed with
    skipped(step_left) on every durable position; nothing runs, no decision is cleared."""
    with raw(office.url) as conn:
        entry_id = add_entry(
            conn, office.task, office.review, 1, digest_of(on_enter(conn, office.review))
        )
        add_marker(conn, entry_id, 0, CLEAR, "in_progress", epoch=DEAD_EPOCH)
        kept = add_decision(conn, office.task, office.review, office.seats[0])

    report, _epoch = _restart(office.url)

    assert report == {"scanned": 1, "redispatched": 0, "skipped": {"step_left": 1}, "errors": 0}
    with raw(office.url) as conn:
        (entry,) = entries(conn, office.task)
        assert run_rows(conn, office.task) == []
        assert decision_ids(conn, office.task, office.review) == {kept}
    assert entry["terminal"] is True
    assert entry["markers"] == [
        (0, CLEAR, "skipped", "step_left"),
        (1, FAN_OUT, "skipped", "step_left"),
    ]


def test_ac_b9_a2_superseded_entry_is_not_rerun(office: Office) -> None:
    """AC-B9(a2): two non-terminal entries for (task, Review) after a leave-and-return - the
    older in_progress under a dead epoch, the newer with its clear done. The older is closed
    skipped(superseded) and its clear_decisions does not run (the decision recorded in the
    newer entry survives); the newer resumes and fans out once per reviewer."""
    with raw(office.url) as conn:
        older = _pending_at_review(conn, office, seq=1)
        add_marker(conn, older, 0, CLEAR, "in_progress", epoch=DEAD_EPOCH)
        newer = add_entry(
            conn, office.task, office.review, 2, digest_of(on_enter(conn, office.review))
        )
        add_marker(conn, newer, 0, CLEAR, "done")
        kept = add_decision(conn, office.task, office.review, office.seats[2])

    report, _epoch = _restart(office.url)

    assert report == {
        "scanned": 2,
        "redispatched": 1,
        "skipped": {"superseded": 1},
        "errors": 0,
    }
    with raw(office.url) as conn:
        by_seq = {e["entry_seq"]: e for e in entries(conn, office.task)}
        assert decision_ids(conn, office.task, office.review) == {kept}
        runs = run_rows(conn, office.task)
    assert by_seq[1]["terminal"] is True
    assert by_seq[1]["markers"] == [
        (0, CLEAR, "skipped", "superseded"),
        (1, FAN_OUT, "skipped", "superseded"),
    ]
    assert by_seq[2]["terminal"] is True
    assert by_seq[2]["markers"] == DONE_ENTRY
    assert sorted(r["agent_profile_id"] for r in runs) == sorted(office.reviewers)


def test_ac_b9_b_ac_c2_entry_with_failed_clear_is_not_resumed(office: Office) -> None:
    """AC-B9(b) / AC-C2: an entry whose clear_decisions is marked failed is set terminal and
    not resumed: the fan-out after it gets no run and no marker."""
    with raw(office.url) as conn:
        entry_id = _pending_at_review(conn, office)
        add_marker(conn, entry_id, 0, CLEAR, "failed", cause="OperationalError: disk I/O error")
        kept = add_decision(conn, office.task, office.review, office.seats[0])

    report, _epoch = _restart(office.url)

    assert report["scanned"] == 1
    assert report["redispatched"] == 0
    assert report["errors"] == 0
    with raw(office.url) as conn:
        (entry,) = entries(conn, office.task)
        assert run_rows(conn, office.task) == []
        assert decision_ids(conn, office.task, office.review) == {kept}
    assert entry["terminal"] is True
    assert entry["markers"] == [(0, CLEAR, "failed", None)]

    second, _epoch = _restart(office.url)
    assert second["scanned"] == 0


def test_ac_b9_c_records_processed_in_task_step_seq_order(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-B9(c): records are processed in (task_id, step_id, entry_seq) order whatever order
    they were written in. Four tasks at Review, each with a step_left entry at Approval and two
    entries at Review (the older superseded, the newer re-dispatched), written in reverse."""
    office = build_office(db_url, tasks=4)
    planned = sorted(
        (task, step, seq)
        for task in office.tasks
        for step, seq in ((office.approval, 1), (office.review, 1), (office.review, 2))
    )
    ids: dict[str, tuple[str, str, int]] = {}
    with raw(db_url) as conn:
        digests = {s: digest_of(on_enter(conn, s)) for s in (office.review, office.approval)}
        for task in office.tasks:
            place(conn, task, office.review)
        for task, step, seq in reversed(planned):
            ids[add_entry(conn, task, step, seq, digests[step])] = (task, step, seq)

    seen: list[str] = []
    real_close, real_redispatch = recovery_close.close_entries, core.entry.redispatch

    def close_entries(uow: Any, registry: Any, batch: Any, **kwargs: Any) -> Any:
        seen.extend(closing.record.id for closing in batch)
        return real_close(uow, registry, batch, **kwargs)

    def redispatch(host: Any, task: Any, step: Any, entry: Any) -> Any:
        seen.append(entry.id)
        return real_redispatch(host, task, step, entry)

    monkeypatch.setattr(recovery_close, "close_entries", close_entries)
    monkeypatch.setattr(core.entry, "redispatch", redispatch)
    report, _epoch = _restart(db_url)

    assert [ids[i] for i in seen] == planned
    assert report == {
        "scanned": 12,
        "redispatched": 4,
        "skipped": {"step_left": 4, "superseded": 4},
        "errors": 0,
    }


# -- AC-B9 (d): the declaration digest -------------------------------------------------------------

RESET = {"type": "reset_agent_context", "config": {}}


def _declaration_shape(
    office: Office, at_allocation: list[dict[str, Any]], done: list[tuple[int, str]]
) -> tuple[str, str]:
    """Review declared `at_allocation` when the entry was allocated; `done` positions hold
    done markers. Returns the entry id and a decision recorded after those positions ran."""
    with raw(office.url) as conn:
        set_on_enter(conn, office.review, at_allocation)
        place(conn, office.task, office.review)
        entry_id = add_entry(conn, office.task, office.review, 1, digest_of(at_allocation))
        for position, kind in done:
            add_marker(conn, entry_id, position, kind, "done")
        decision = add_decision(conn, office.task, office.review, office.seats[0])
    return entry_id, decision


def _digest_warnings(logs: list[dict[str, Any]], office: Office) -> list[dict[str, Any]]:
    return [
        r
        for r in records(logs, "WARNING", task_id=office.task, step_id=office.review)
        if "recorded_digest" in r["extra"] and "current_digest" in r["extra"]
    ]


def test_ac_b9_d_insert_of_same_kind_terminalises_without_second_clear(
    office: Office, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B9(d), insert case (the spec's worked example): the entry ran [reset_agent_context,
    clear_decisions, fan-out] up to a done clear at position 1; a sync then inserts a second
    clear_decisions at position 2. The digest differs, so the entry is terminalised with
    skipped(declaration_changed): no second clear_decisions delete commits (the decision
    recorded after the first clear survives) and no fan-out runs."""
    allocated = [RESET, CLEAR_DECL, REVIEWER_FAN_OUT]
    _entry_id, decision = _declaration_shape(office, allocated, [(1, CLEAR)])
    with raw(office.url) as conn:
        set_on_enter(conn, office.review, [RESET, CLEAR_DECL, CLEAR_DECL, REVIEWER_FAN_OUT])
    laneway_logs.clear()

    report, _epoch = _restart(office.url)

    assert report["skipped"] == {"declaration_changed": 1}
    assert report["redispatched"] == 0
    with raw(office.url) as conn:
        assert decision_ids(conn, office.task, office.review) == {decision}
        assert run_rows(conn, office.task) == []
        (entry,) = entries(conn, office.task)
    assert entry["terminal"] is True
    assert entry["markers"] == [
        (1, CLEAR, "done", None),
        (2, CLEAR, "skipped", "declaration_changed"),
        (3, FAN_OUT, "skipped", "declaration_changed"),
    ]
    (warning,) = _digest_warnings(laneway_logs, office)
    assert warning["extra"]["recorded_digest"] == digest_of(allocated)
    assert warning["extra"]["workflow_id"] == office.workflow_id


def test_ac_b9_d_removal_runs_nothing_under_another_actions_marker(
    office: Office, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B9(d), remove case: the entry ran [reset_agent_context, clear_decisions, fan-out] up
    to a done clear at position 1; a sync removes reset_agent_context, shifting clear to 0 and
    the fan-out to 1. A per-position reading would run the clear at 0 again and the fan-out;
    the digest terminalises the entry instead: no delete, no run, tail skipped."""
    entry_id, decision = _declaration_shape(
        office, [RESET, CLEAR_DECL, REVIEWER_FAN_OUT], [(1, CLEAR)]
    )
    with raw(office.url) as conn:
        set_on_enter(conn, office.review, [CLEAR_DECL, REVIEWER_FAN_OUT])
    laneway_logs.clear()

    report, _epoch = _restart(office.url)

    assert report["skipped"] == {"declaration_changed": 1}
    with raw(office.url) as conn:
        assert decision_ids(conn, office.task, office.review) == {decision}
        assert run_rows(conn, office.task) == []
        markers = marker_rows(conn, entry_id)
        (entry,) = entries(conn, office.task)
    assert entry["terminal"] is True
    assert markers[(0, CLEAR)]["state"] == "skipped"
    assert markers[(0, CLEAR)]["reason"] == "declaration_changed"
    assert markers[(1, FAN_OUT)]["state"] == "skipped"
    assert markers[(1, FAN_OUT)]["reason"] == "declaration_changed"
    assert markers[(1, CLEAR)]["state"] == "done"  # the old position's marker, left alone
    assert len(_digest_warnings(laneway_logs, office)) == 1


def test_ac_b9_d_config_only_change_keeps_the_entry(
    office: Office, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B9(d) negative / Execution model: the fan-out's config changes (reason) with kinds and
    order unchanged. The digest matches, so the entry is not terminalised early: the done
    clear is honoured and the remaining fan-out runs - once per reviewer - with no warning."""
    _entry_id, decision = _declaration_shape(office, [CLEAR_DECL, REVIEWER_FAN_OUT], [(0, CLEAR)])
    changed = {"type": FAN_OUT, "config": {"role": "reviewer", "reason": "second_look"}}
    with raw(office.url) as conn:
        set_on_enter(conn, office.review, [CLEAR_DECL, changed])
    laneway_logs.clear()

    report, _epoch = _restart(office.url)

    assert report == {"scanned": 1, "redispatched": 1, "skipped": {}, "errors": 0}
    with raw(office.url) as conn:
        assert decision_ids(conn, office.task, office.review) == {decision}
        runs = run_rows(conn, office.task)
        (entry,) = entries(conn, office.task)
    assert sorted(r["agent_profile_id"] for r in runs) == sorted(office.reviewers)
    assert {r["reason"] for r in runs} == {"second_look"}  # the declaration as read now
    assert entry["terminal"] is True
    assert entry["markers"] == DONE_ENTRY
    assert _digest_warnings(laneway_logs, office) == []


# -- AC-B9 (e), (f) --------------------------------------------------------------------------------


def test_ac_b9_e_unresolvable_entry_is_closed_with_a_warning(
    db_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B9(e): an entry whose step was removed (a sync deleted Approval while the task stood
    there) and one whose step never existed are closed skipped(unresolvable), not executed,
    each with a WARNING carrying task_id and step_id as discrete fields; a later start does
    not select them again."""
    office = build_office(db_url, tasks=2)
    first, second = office.tasks
    with raw(db_url) as conn:
        place(conn, first, office.approval)
        gone = add_entry(conn, first, office.approval, 1, digest_of(on_enter(conn, office.review)))
        add_marker(conn, gone, 0, CLEAR, "in_progress", epoch=DEAD_EPOCH)
        add_decision(conn, first, office.approval, office.seats[0])
        conn.execute(sa.delete(t.workflow_steps).where(t.workflow_steps.c.id == office.approval))
        never = add_entry(conn, second, "no-such-step", 1, digest_of([CLEAR_DECL]))
    laneway_logs.clear()

    report, _epoch = _restart(db_url)

    assert report == {"scanned": 2, "redispatched": 0, "skipped": {"unresolvable": 2}, "errors": 0}
    for task_id, step_id in ((first, office.approval), (second, "no-such-step")):
        assert len(records(laneway_logs, "WARNING", task_id=task_id, step_id=step_id)) == 1
    with raw(db_url) as conn:
        by_id = {e["id"]: e for task in office.tasks for e in entries(conn, task)}
        assert run_rows(conn, first) == []
        assert len(decision_ids(conn, first, office.approval)) == 1
    assert by_id[gone]["terminal"] is True
    assert by_id[gone]["markers"] == [(0, CLEAR, "skipped", "unresolvable")]
    assert by_id[never]["terminal"] is True

    again, _epoch = _restart(db_url)
    assert again["scanned"] == 0


def test_ac_b9_e_undecodable_declaration_is_unresolvable(
    office: Office, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B9(e): a record whose on_enter declaration cannot be loaded (the step's stored events
    are not decodable) is closed skipped(unresolvable) with the WARNING naming task and step -
    not retried as a transient failure on every start."""
    with raw(office.url) as conn:
        entry_id = _pending_at_review(conn, office)
        conn.execute(
            sa.update(t.workflow_steps)
            .where(t.workflow_steps.c.id == office.review)
            .values(events="{not json")
        )
    laneway_logs.clear()

    report, _epoch = _restart(office.url)

    with raw(office.url) as conn:
        (entry,) = entries(conn, office.task)
    assert entry["id"] == entry_id
    assert report["skipped"] == {"unresolvable": 1}
    assert report["errors"] == 0
    assert entry["terminal"] is True
    assert records(laneway_logs, "WARNING", task_id=office.task, step_id=office.review)


def test_ac_b9_f_transient_record_error_is_logged_and_left_pending(
    db_url: str, monkeypatch: pytest.MonkeyPatch, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B9(f), per record: re-dispatching one entry raises a transient error. The scan logs
    an ERROR naming the task and step, leaves that entry non-terminal, processes the others,
    and the host opens; the next start retries the entry and completes it."""
    office = build_office(db_url, tasks=3)
    with raw(db_url) as conn:
        pending = {task: _pending_at_review(conn, office, task) for task in office.tasks}
    victim = sorted(office.tasks)[1]
    real = core.entry.redispatch

    def flaky(host: Any, task: Any, step: Any, entry: Any) -> Any:
        if task.id == victim:
            raise sa.exc.OperationalError("UPDATE step_entry_markers", {}, Exception("locked"))
        return real(host, task, step, entry)

    monkeypatch.setattr(core.entry, "redispatch", flaky)
    laneway_logs.clear()
    report, _epoch = _restart(db_url)

    assert report == {"scanned": 3, "redispatched": 2, "skipped": {}, "errors": 1}
    (error,) = records(laneway_logs, "ERROR")
    assert error["extra"]["task_id"] == victim
    assert error["extra"]["step_id"] == office.review
    assert error["extra"].get("cause")
    with raw(db_url) as conn:
        for task in office.tasks:
            (entry,) = entries(conn, task)
            if task == victim:
                assert entry["terminal"] is False
                assert entry["markers"] == []
                assert run_rows(conn, task) == []
            else:
                assert entry["terminal"] is True
                assert _reviewers_with_runs(conn, task) == sorted(office.reviewers)

    monkeypatch.setattr(core.entry, "redispatch", real)
    retried, _epoch = _restart(db_url)
    assert retried == {"scanned": 1, "redispatched": 1, "skipped": {}, "errors": 0}
    with raw(db_url) as conn:
        (entry,) = entries(conn, victim)
        assert entry["id"] == pending[victim]
        assert entry["terminal"] is True
        assert _reviewers_with_runs(conn, victim) == sorted(office.reviewers)


def test_ac_b9_f_failing_scan_query_does_not_stop_the_host(
    db_url: str, monkeypatch: pytest.MonkeyPatch, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B9(f), the load-bearing half: the scan's own query fails. The failure is logged at
    ERROR, the host opens and serves (a manual move dispatches in full), and the incomplete
    entry waits, untouched, for the next start - which completes it."""
    office = build_office(db_url, tasks=2)
    stuck, fresh = office.tasks
    with raw(db_url) as conn:
        entry_id = _pending_at_review(conn, office, stuck)
    monkeypatch.setattr(
        recovery,
        "pending_query",
        lambda: sa.select(sa.column("id")).select_from(sa.table("no_such_table")),
    )
    laneway_logs.clear()

    with open_host(db_url) as host:
        report = host.recovery_report.as_dict()
        moved = host.tasks.move(fresh, "Review")
    assert moved.workflow_step_id == office.review
    assert report["errors"] == 1
    assert report["scanned"] == 0
    (error,) = records(laneway_logs, "ERROR")
    assert error["extra"].get("cause")
    with raw(db_url) as conn:
        (entry,) = entries(conn, stuck)
        assert entry["terminal"] is False
        assert _reviewers_with_runs(conn, fresh) == sorted(office.reviewers)

    monkeypatch.undo()
    later, _epoch = _restart(db_url)
    assert later == {"scanned": 1, "redispatched": 1, "skipped": {}, "errors": 0}
    with raw(db_url) as conn:
        (entry,) = entries(conn, stuck)
        assert entry["id"] == entry_id
        assert entry["terminal"] is True


def test_task_delete_cascades_pending_entry_out_of_the_scan(office: Office) -> None:
    """Task-delete cascade (Execution model, AC-B9(e)): deleting a task with a non-terminal
    entry removes the entry and its markers; the next scan does not see it."""
    with open_host(office.url) as host:
        with raw(office.url) as conn:
            entry_id = _pending_at_review(conn, office)
            add_marker(conn, entry_id, 0, CLEAR, "in_progress", epoch=DEAD_EPOCH)
        host.tasks.delete(office.task)
    with raw(office.url) as conn:
        left = conn.execute(
            sa.select(sa.func.count())
            .select_from(t.step_entries)
            .where(t.step_entries.c.id == entry_id)
        ).scalar_one()
        markers = conn.execute(
            sa.select(sa.func.count())
            .select_from(t.step_entry_markers)
            .where(t.step_entry_markers.c.entry_id == entry_id)
        ).scalar_one()
    assert (left, markers) == (0, 0)

    report, _epoch = _restart(office.url)
    assert report == {"scanned": 0, "redispatched": 0, "skipped": {}, "errors": 0}


# -- AC-B2 / AC-B5 / AC-B6 / AC-B8 -----------------------------------------------------------------


def _count_clears(host: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Spy on the host's decision clear (the single DELETE clear_decisions issues): one item,
    the number of rows it removed, per call from now on."""
    calls: list[int] = []
    real = host.decisions.clear

    def clear(uow: Any, task_id: str, step_id: str) -> int:
        removed = int(real(uow, task_id, step_id))
        calls.append(removed)
        return removed

    monkeypatch.setattr(host.decisions, "clear", clear)
    return calls


def test_ac_b2_ac_b5_entry_dispatched_twice_clears_and_fans_out_once(
    office: Office, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-B2 / AC-B5: the same committed entry dispatched twice - and a third time by a fresh
    host sharing only the durable state - issues one clear_decisions DELETE in total (a
    decision recorded between the dispatches survives) and one run per reviewer."""
    with open_host(office.url) as host:
        with raw(office.url) as conn:
            entry_id = _pending_at_review(conn, office)
            stale = add_decision(conn, office.task, office.review, office.seats[0])
        deletes = _count_clears(host, monkeypatch)
        task = host.tasks.get(office.task)
        _wf, step = host.workflows.step_by_id(office.review)
        with host.store.read() as conn:
            record = ledger.load_entry(conn, entry_id)
        assert record is not None

        assert core.entry.redispatch(host, task, step, record) == "completed"
        with raw(office.url) as conn:
            assert stale not in decision_ids(conn, office.task, office.review)
            fresh = add_decision(conn, office.task, office.review, office.seats[1])
            first_runs = {r["id"] for r in run_rows(conn, office.task)}
        assert deletes == [1]

        core.entry.redispatch(host, task, step, record)
        assert deletes == [1]

    with open_host(office.url) as restarted:
        assert restarted.recovery_report.scanned == 0
        deletes_after = _count_clears(restarted, monkeypatch)
        core.entry.redispatch(restarted, task, step, record)
    assert deletes_after == []

    with raw(office.url) as conn:
        assert decision_ids(conn, office.task, office.review) == {fresh}
        runs = run_rows(conn, office.task)
        (entry,) = entries(conn, office.task)
    assert {r["id"] for r in runs} == first_runs
    assert sorted(r["agent_profile_id"] for r in runs) == sorted(office.reviewers)
    assert entry["markers"] == DONE_ENTRY


def test_ac_b6_clear_marker_and_delete_share_one_transaction(
    office: Office, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-B6: when clear_decisions' done-marker write fails, its DELETE does not commit either
    (they share one transaction), nothing after it runs, and the entry stays pending; the
    next start re-runs the clear (no marker proves no delete) and completes the entry."""
    real = ledger.settle

    def settle(conn: Any, entry_id: str, position: int, kind: str, state: str, **kw: Any) -> None:
        if kind == CLEAR and state == "done":
            raise sa.exc.OperationalError("UPDATE step_entry_markers", {}, Exception("I/O"))
        real(conn, entry_id, position, kind, state, **kw)

    with open_host(office.url) as host:
        with raw(office.url) as conn:
            entry_id = _pending_at_review(conn, office)
            seeded = add_decision(conn, office.task, office.review, office.seats[0])
        task = host.tasks.get(office.task)
        _wf, step = host.workflows.step_by_id(office.review)
        with host.store.read() as conn:
            record = ledger.load_entry(conn, entry_id)
        assert record is not None
        monkeypatch.setattr(ledger, "settle", settle)
        with pytest.raises(sa.exc.OperationalError):
            core.entry.redispatch(host, task, step, record)
        monkeypatch.setattr(ledger, "settle", real)

    with raw(office.url) as conn:
        assert decision_ids(conn, office.task, office.review) == {seeded}
        assert marker_rows(conn, entry_id) == {}
        assert run_rows(conn, office.task) == []
        (entry,) = entries(conn, office.task)
    assert entry["terminal"] is False

    report, _epoch = _restart(office.url)
    assert report["redispatched"] == 1
    with raw(office.url) as conn:
        assert decision_ids(conn, office.task, office.review) == set()
        assert _reviewers_with_runs(conn, office.task) == sorted(office.reviewers)
        (entry,) = entries(conn, office.task)
    assert entry["markers"] == DONE_ENTRY


def _session_effects(conn: sa.Connection, task_id: str) -> dict[str, Any]:
    (raw_meta,) = conn.execute(
        sa.select(t.task_sessions.c.metadata).where(t.task_sessions.c.task_id == task_id)
    ).one()
    meta: dict[str, Any] = json.loads(raw_meta)
    return meta


def test_ac_b8_recovery_never_reruns_session_kinds(office: Office) -> None:
    """AC-B8 (and AC-A1's carve-out): Review declares reset_agent_context and auto_start_agent
    around the durable clear_decisions + fan-out. The session kinds run once on the arrival,
    hold no marker, and a crash-recovered dispatch of the same entry does not run them again:
    the session's context_resets and prompts counts are unchanged."""
    start = {"type": "auto_start_agent", "config": {}}
    declared = [RESET, CLEAR_DECL, REVIEWER_FAN_OUT, start]
    with raw(office.url) as conn:
        set_on_enter(conn, office.review, declared)
    with open_host(office.url) as host:
        host.sessions.start(office.task)
        host.tasks.move(office.task, "Review")
    with raw(office.url) as conn:
        effects = _session_effects(conn, office.task)
        assert len(effects["context_resets"]) == 1
        assert len(effects["prompts"]) == 1
        (entry,) = entries(conn, office.task)
        assert entry["markers"] == [(1, CLEAR, "done", None), (2, FAN_OUT, "done", None)]
        # the crash shape: the fan-out's claim was taken by a process that died
        conn.execute(
            sa.update(t.step_entry_markers)
            .where(
                t.step_entry_markers.c.entry_id == entry["id"],
                t.step_entry_markers.c.position == 2,
            )
            .values(state="in_progress", epoch=DEAD_EPOCH)
        )
        conn.execute(
            sa.update(t.step_entries)
            .where(t.step_entries.c.id == entry["id"])
            .values(terminal=False)
        )

    report, _epoch = _restart(office.url)

    assert report["redispatched"] == 1
    with raw(office.url) as conn:
        after = _session_effects(conn, office.task)
        (entry,) = entries(conn, office.task)
        assert _reviewers_with_runs(conn, office.task) == sorted(office.reviewers)
    assert after["context_resets"] == effects["context_resets"]
    assert after["prompts"] == effects["prompts"]
    assert entry["terminal"] is True
    assert entry["markers"] == [(1, CLEAR, "done", None), (2, FAN_OUT, "done", None)]


# -- the operator's view and the index -------------------------------------------------------------


def _laneway_command() -> list[str] | None:
    """The `laneway` console script of this interpreter's environment, if it works."""
    beside = Path(sys.executable).with_name("laneway")
    found = str(beside) if beside.exists() else shutil.which("laneway")
    if found is None:
        return None
    probe = subprocess.run([found, "--help"], capture_output=True, timeout=60, check=False)
    return [found] if probe.returncode == 0 else None


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_ac_b9_recover_json_reports_the_scan(db_url: str) -> None:
    """AC-B9 through `laneway --db URL --json recover` (CLI.md): one JSON object with
    scanned / redispatched / skipped{reason: n} / errors counting what the scan did."""
    command = _laneway_command()
    if command is None:
        pytest.skip("the `laneway` command is not installed in this environment")
    office = build_office(db_url, tasks=4)
    again, left, lost, halted = office.tasks
    with raw(db_url) as conn:
        digest = digest_of(on_enter(conn, office.review))
        _pending_at_review(conn, office, again, seq=1)
        add_entry(conn, again, office.review, 2, digest)
        add_entry(conn, left, office.review, 1, digest)  # the task stands at Work
        add_entry(conn, lost, "no-such-step", 1, digest)
        failed = _pending_at_review(conn, office, halted)
        add_marker(conn, failed, 0, CLEAR, "failed", cause="boom")

    env = {**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office"}
    env.pop("LANEWAY_PLUGINS_BLOCK", None)

    def recover() -> dict[str, Any]:
        done = subprocess.run(
            [*command, "--db", db_url, "--json", "recover"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    # `runs_requeued` / `runs_dead` extend CLI.md's shape: runs of dead workers re-queued;
    # `triggers_delivered`: what the trigger outbox held (issue 24); `hosts_unattended`: hosts
    # runs wait for with no worker alive (issue 43).
    assert recover() == {
        "scanned": 5,
        "redispatched": 1,
        "skipped": {"superseded": 1, "step_left": 1, "unresolvable": 1},
        "errors": 0,
        "runs_requeued": 0,
        "runs_dead": 0,
        "triggers_delivered": 0,
        "hosts_unattended": [],
    }
    assert recover() == {
        "scanned": 0,
        "redispatched": 0,
        "skipped": {},
        "errors": 0,
        "runs_requeued": 0,
        "runs_dead": 0,
        "triggers_delivered": 0,
        "hosts_unattended": [],
    }


def test_ac_b9_pending_query_uses_the_pending_index(db_url: str) -> None:
    """AC-B9 / Execution model: recovery is one indexed query. The plan of
    core.recovery.pending_query() (compiled with literal binds) reads ix_step_entries_pending
    (SQLite: EXPLAIN QUERY PLAN; PostgreSQL: EXPLAIN with sequential scans priced out, as the
    tables of a fresh database are too small for the planner to prefer any index)."""
    with open_host(db_url) as host:
        engine = host.store.engine
        sql = str(
            recovery.pending_query().compile(
                dialect=engine.dialect, compile_kwargs={"literal_binds": True}
            )
        )
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                plan = [str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
            else:
                conn.exec_driver_sql("SET enable_seqscan = off")
                plan = [str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {sql}")]
    assert any("ix_step_entries_pending" in line for line in plan), plan


def test_ac_b9_a_entry_whose_task_came_back_queued_is_skipped_step_left(office: Office) -> None:
    """AC-B9(a): an entry left non-terminal at Review whose task then left and came back
    *queued* (Review full) does not occupy Review: recovery closes the entry skipped(step_left)
    and queues no reviewer run for it."""
    with raw(office.url) as conn:
        entry_id = add_entry(
            conn, office.task, office.review, 1, digest_of(on_enter(conn, office.review))
        )
        add_marker(conn, entry_id, 0, CLEAR, "in_progress", epoch=DEAD_EPOCH)
        conn.execute(
            sa.update(t.tasks)
            .where(t.tasks.c.id == office.task)
            .values(
                workflow_step_id=office.review,
                wip_admitted=False,
                queued_for_step_id=office.review,
                queued_at="2026-01-01T00:00:00Z",
            )
        )

    report, _epoch = _restart(office.url)

    assert report == {"scanned": 1, "redispatched": 0, "skipped": {"step_left": 1}, "errors": 0}
    with raw(office.url) as conn:
        (entry,) = entries(conn, office.task)
        assert run_rows(conn, office.task) == []
    assert entry["terminal"] is True
    assert entry["markers"] == [
        (0, CLEAR, "skipped", "step_left"),
        (1, FAN_OUT, "skipped", "step_left"),
    ]
