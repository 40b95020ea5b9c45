"""The recovery scan's batch close (core.recovery_close; spec on-enter AC-B9(a1)/(a2), issue 14
target 3): entries that only need closing are closed a batch per transaction by set-based
conditional statements. These tests pin what the batch must keep from the per-entry skip:
each entry settled by its own case, each marker and its `entry.marker` event written once,
a position held by a live epoch never taken, an entry whose task came back never skipped -
and, with real processes racing, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from core import ids, recovery, recovery_close
from core.store import events
from core.store import tables as t
from tests.conftest import open_host
from tests.multiprocess.conftest import child_env
from tests.on_enter.conftest import (
    CLEAR,
    DEAD_EPOCH,
    FAN_OUT,
    Office,
    add_entry,
    add_marker,
    build_office,
    digest_of,
    entries,
    marker_rows,
    on_enter,
    place,
    raw,
    records,
    run_rows,
)

DONE_ENTRY = [(0, CLEAR, "done", None), (1, FAN_OUT, "done", None)]


def _marker_events(conn: sa.Connection) -> list[tuple[str | None, dict[str, Any]]]:
    """Every stored `entry.marker` event in id order, as (task_id, data)."""
    found = conn.execute(
        sa.select(t.board_events.c.task_id, t.board_events.c.data)
        .where(t.board_events.c.type == "entry.marker")
        .order_by(t.board_events.c.id)
    ).all()
    return [(task, json.loads(data)) for task, data in found]


def test_ac_b9_a_batch_mixing_superseded_step_left_and_resumable_settles_each(
    db_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B9(a1)/(a2) in one batch: a superseded entry whose clear was left in_progress by a
    dead epoch (re-claimed, then skipped), a step_left entry whose clear is done (left done,
    only the fan-out skipped), a superseded entry with no marker, and two resumable entries.
    Each is settled by its own case; the closed ones get exactly the markers and the
    `entry.marker` events (shape, task, order) the per-entry skip wrote, and no WARNING."""
    office = build_office(db_url, tasks=3)
    a, b, c = office.tasks
    with raw(db_url) as conn:
        digest = digest_of(on_enter(conn, office.review))
        place(conn, a, office.review)
        place(conn, c, office.review)
        a1 = add_entry(conn, a, office.review, 1, digest)
        add_marker(conn, a1, 0, CLEAR, "in_progress", epoch=DEAD_EPOCH)
        a2 = add_entry(conn, a, office.review, 2, digest)
        b1 = add_entry(conn, b, office.review, 1, digest)  # b stands at Work
        add_marker(conn, b1, 0, CLEAR, "done")
        c1 = add_entry(conn, c, office.review, 1, digest)
        c2 = add_entry(conn, c, office.review, 2, digest)
        add_marker(conn, c2, 0, CLEAR, "done")
        before = len(_marker_events(conn))
    laneway_logs.clear()

    with open_host(db_url) as host:
        report = host.recovery_report.as_dict()
        epoch = host.epoch

    assert report == {
        "scanned": 5,
        "redispatched": 2,
        "skipped": {"superseded": 2, "step_left": 1},
        "errors": 0,
    }
    assert records(laneway_logs, "WARNING") == []
    assert records(laneway_logs, "ERROR") == []
    with raw(db_url) as conn:
        by_id = {e["id"]: e for task in office.tasks for e in entries(conn, task)}
        reclaimed = marker_rows(conn, a1)[(0, CLEAR)]
        emitted = _marker_events(conn)[before:]
        for task in (a, c):
            assert sorted(r["agent_profile_id"] for r in run_rows(conn, task)) == sorted(
                office.reviewers
            )
        assert run_rows(conn, b) == []
    assert all(e["terminal"] for e in by_id.values())
    assert by_id[a1]["markers"] == [
        (0, CLEAR, "skipped", "superseded"),
        (1, FAN_OUT, "skipped", "superseded"),
    ]
    assert reclaimed["epoch"] == epoch  # re-claimed from the dead epoch, then settled
    assert by_id[b1]["markers"] == [(0, CLEAR, "done", None), (1, FAN_OUT, "skipped", "step_left")]
    assert by_id[c1]["markers"] == [
        (0, CLEAR, "skipped", "superseded"),
        (1, FAN_OUT, "skipped", "superseded"),
    ]
    assert by_id[a2]["markers"] == DONE_ENTRY
    assert by_id[c2]["markers"] == DONE_ENTRY

    def of(entry_id: str) -> list[tuple[str | None, dict[str, Any]]]:
        return [(task, data) for task, data in emitted if data["entry_id"] == entry_id]

    def event(entry_id: str, position: int, kind: str, state: str, reason: str | None) -> Any:
        task = by_id[entry_id]["task_id"]
        fields = {"entry_id": entry_id, "position": position, "kind": kind}
        return (task, {**fields, "state": state, "reason": reason})

    # the re-claim from the dead epoch and the skip commit together: the marker's in_progress
    # state never commits as its own, so only the settled event is stored (docs/serve.md)
    assert of(a1) == [
        event(a1, 0, CLEAR, "skipped", "superseded"),
        event(a1, 1, FAN_OUT, "skipped", "superseded"),
    ]
    assert of(b1) == [event(b1, 1, FAN_OUT, "skipped", "step_left")]
    assert of(c1) == [
        event(c1, 0, CLEAR, "skipped", "superseded"),
        event(c1, 1, FAN_OUT, "skipped", "superseded"),
    ]


def test_issue14_scan_closes_with_its_wide_page_cache_and_puts_the_default_back(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14 target 3 (recovery in proportion, memory bounded), AC-B9(a2): on SQLite the
    scan's closing transactions run with `SCAN_CACHE_KIB` of page cache on the writer
    connection, and when the scan ends that connection is back at SQLite's default: a host's
    memory does not keep what the scan needed."""
    office = build_office(sqlite_url)
    with raw(sqlite_url) as conn:
        digest = digest_of(on_enter(conn, office.review))
        place(conn, office.task, office.review)
        superseded = add_entry(conn, office.task, office.review, 1, digest)
        add_entry(conn, office.task, office.review, 2, digest, terminal=True)
    seen: list[int] = []
    real = recovery_close.close_entries

    def noting_the_cache(uow: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(int(uow.conn.exec_driver_sql("PRAGMA cache_size").scalar_one()))
        return real(uow, *args, **kwargs)

    monkeypatch.setattr(recovery_close, "close_entries", noting_the_cache)
    with open_host(sqlite_url) as host:
        report = host.recovery_report.as_dict()
        with host.store.write_connection() as conn:
            after = int(conn.exec_driver_sql("PRAGMA cache_size").scalar_one())

    assert report["skipped"] == {"superseded": 1}
    assert seen == [-recovery.SCAN_CACHE_KIB]
    assert after == -2000  # SQLite's default
    with raw(sqlite_url) as conn:
        (closed,) = [e for e in entries(conn, office.task) if e["id"] == superseded]
    assert closed["terminal"]


def test_issue14_pending_index_holds_only_non_terminal_entries(db_url: str) -> None:
    """Issue 14 target 3 / AC-B9: ix_step_entries_pending, which the recovery query reads, is
    partial on `terminal IS false` (migration 0007), so closing an entry deletes it from the
    index instead of moving it into a range nothing reads."""
    with open_host(db_url) as host, host.store.read() as conn:
        if conn.dialect.name == "sqlite":
            definition = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'ix_step_entries_pending'"
            ).scalar_one()
        else:
            definition = conn.exec_driver_sql(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_step_entries_pending'"
            ).scalar_one()
    text = " ".join(str(definition).lower().replace("(", " ").replace(")", " ").split())
    assert text.endswith(("where terminal is 0", "where terminal is false"))
    assert "terminal," not in text  # not a column of the index any more


def test_ac_b9_a1_entry_whose_task_came_back_after_the_read_is_not_skipped(
    office: Office, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-B9(a1) under a concurrent move: the scan reads an entry whose task stands at Work
    (step_left), then - before the batch writes - the task is put back at Review without an
    arrival (as `restore_step` does: no new entry). The batch's conditional UPDATE finds the
    entry occupied again and leaves it; it is re-dispatched (one run per reviewer), never
    closed skipped(step_left)."""
    with raw(office.url) as conn:
        entry_id = add_entry(
            conn, office.task, office.review, 1, digest_of(on_enter(conn, office.review))
        )
    real = recovery._next_batch

    def then_restored(*args: Any) -> Any:
        found = real(*args)
        if found[0]:
            with raw(office.url) as conn:
                place(conn, office.task, office.review)
        return found

    monkeypatch.setattr(recovery, "_next_batch", then_restored)
    with open_host(office.url) as host:
        report = host.recovery_report.as_dict()

    assert report == {"scanned": 1, "redispatched": 1, "skipped": {}, "errors": 0}
    with raw(office.url) as conn:
        (entry,) = entries(conn, office.task)
        runs = run_rows(conn, office.task)
    assert entry["id"] == entry_id
    assert entry["markers"] == DONE_ENTRY
    assert sorted(r["agent_profile_id"] for r in runs) == sorted(office.reviewers)


def test_ac_f1_live_epoch_in_a_batch_rolls_it_back_and_only_that_entry_waits(
    db_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-F1 inside a batch: of two step_left entries closed together, one has its clear held
    in_progress by a live epoch (this very host's). The batch rolls back whole; decided one by
    one, the held entry is left to its holder untouched and silently, the other is closed."""
    office = build_office(db_url, tasks=2)
    held_task, free_task = office.tasks
    with open_host(db_url, recover=False) as host:
        assert host.epoch is not None
        with raw(db_url) as conn:
            digest = digest_of(on_enter(conn, office.review))
            held = add_entry(conn, held_task, office.review, 1, digest)
            add_marker(conn, held, 0, CLEAR, "in_progress", epoch=host.epoch)
            free = add_entry(conn, free_task, office.review, 1, digest)
        laneway_logs.clear()

        report = recovery.scan(host)

    assert report.as_dict() == {
        "scanned": 2,
        "redispatched": 0,
        "skipped": {"step_left": 1},
        "errors": 0,
    }
    assert not [r for r in laneway_logs if r["level"] in ("WARNING", "ERROR", "CRITICAL")]
    with raw(db_url) as conn:
        (held_entry,) = entries(conn, held_task)
        (free_entry,) = entries(conn, free_task)
    assert held_entry["id"] == held
    assert held_entry["terminal"] is False
    assert held_entry["markers"] == [(0, CLEAR, "in_progress", None)]
    assert free_entry["id"] == free
    assert free_entry["terminal"] is True
    assert free_entry["markers"] == [
        (0, CLEAR, "skipped", "step_left"),
        (1, FAN_OUT, "skipped", "step_left"),
    ]


# -- real processes scanning at once ---------------------------------------------------------------

# A host process: imports, says it is ready, waits for "go", opens a host (its recovery scan
# runs at open, in batches of argv[2] entries), prints its report and every WARNING+ record,
# and exits.
SCANNER = textwrap.dedent(
    """
    import json, sys
    from loguru import logger
    from core import Host, recovery
    from core.plugin.selection import PluginSelection

    recovery.BATCH = int(sys.argv[2])

    logger.enable("")
    logger.remove()
    logger.add(lambda m: print(json.dumps({"level": m.record["level"].name,
                                           "extra": m.record["extra"]}, default=str),
                               flush=True), level="WARNING")
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    host = Host.open(sys.argv[1], plugins=PluginSelection(allow=frozenset({"kanban", "office"})))
    print(json.dumps({"report": host.recovery_report.as_dict()}), flush=True)
    host.close()
    """
)

TASKS = 8
PER_TASK = 400
"""Pending entries per task: TASKS * PER_TASK spans several of the scanners' batches."""
SCANNER_BATCH = 500


@pytest.mark.slow
def test_ac_b9_scanners_in_three_processes_write_each_marker_and_event_once(db_url: str) -> None:
    """AC-B9(a1)/(a2) with three processes scanning the same board at once (real processes,
    released together): 3,200 pending entries, half superseded (their tasks stand at Review
    with a newer terminal entry), half step_left (their tasks stand at Work). Every entry ends
    terminal with both positions skipped by its reason; each (entry, position) has exactly one
    `entry.marker` event; the three reports together count each entry once; nobody logs a
    WARNING or ERROR."""
    assert TASKS * PER_TASK > 3 * SCANNER_BATCH
    office = build_office(db_url, tasks=TASKS)
    superseded, step_left = office.tasks[: TASKS // 2], office.tasks[TASKS // 2 :]
    with raw(db_url) as conn:
        digest = digest_of(on_enter(conn, office.review))
        stamp = ids.now()
        rows = []
        for task in office.tasks:
            if task in superseded:
                place(conn, task, office.review)
            for seq in range(1, PER_TASK + 2):
                last = seq == PER_TASK + 1
                if last and task in step_left:
                    continue
                rows.append(
                    {
                        "id": ids.new_id(),
                        "task_id": task,
                        "step_id": office.review,
                        "entry_seq": seq,
                        "entry_path": "E2",
                        "declaration_digest": digest,
                        "terminal": last,
                        "created_at": stamp,
                    }
                )
        conn.execute(sa.insert(t.step_entries), rows)
        before = len(_marker_events(conn))

    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCANNER, db_url, str(SCANNER_BATCH)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for _ in range(3)
    ]
    lines: list[list[dict[str, Any]]] = [[] for _ in procs]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert json.loads(proc.stdout.readline()) == {"ready": True}
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc, seen in zip(procs, lines, strict=True):
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
            seen.extend(json.loads(line) for line in out.splitlines() if line.strip())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()

    problems = [line for seen in lines for line in seen if "level" in line]
    assert problems == []
    reports = [line["report"] for seen in lines for line in seen if "report" in line]
    assert len(reports) == 3
    counted: Counter[str] = Counter()
    for report in reports:
        assert report["errors"] == 0
        assert report["redispatched"] == 0
        counted.update(report["skipped"])
    half = TASKS // 2 * PER_TASK
    assert counted == {"superseded": half, "step_left": half}

    with raw(db_url) as conn:
        pending = conn.execute(
            sa.select(sa.func.count()).where(t.step_entries.c.terminal.is_(False))
        ).scalar_one()
        reasons = Counter(
            (position, kind, state, reason)
            for position, kind, state, reason in conn.execute(
                sa.select(
                    t.step_entry_markers.c.position,
                    t.step_entry_markers.c.kind,
                    t.step_entry_markers.c.state,
                    t.step_entry_markers.c.reason,
                )
            )
        )
        emitted = _marker_events(conn)[before:]
        which = sa.select(t.step_entries.c.id, t.step_entries.c.task_id)
        task_of = {entry: task for entry, task in conn.execute(which)}
    assert pending == 0
    assert reasons == {
        (0, CLEAR, "skipped", "superseded"): half,
        (1, FAN_OUT, "skipped", "superseded"): half,
        (0, CLEAR, "skipped", "step_left"): half,
        (1, FAN_OUT, "skipped", "step_left"): half,
    }
    once = Counter((data["entry_id"], data["position"], data["state"]) for _task, data in emitted)
    assert len(once) == 4 * half
    assert set(once.values()) == {1}
    assert all(task == task_of[data["entry_id"]] for task, data in emitted)
    assert {data["state"] for _task, data in emitted} == {"skipped"}


def test_ac_b9_a_batch_close_records_the_per_entry_skips_events_text_order_and_logs(
    db_url: str, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-B9(a1)/(a2), issue 14 target 3: a batch of vacated entries with no marker yet (on
    SQLite its markers and events are written by INSERT ... SELECT over one JSON parameter)
    stores exactly what the per-entry skip stored: one `entry.marker` event per durable
    position, in (task, step, entry_seq, position) order, each with its entry's task, one stamp
    for the batch, and the very JSON text the event log's encoder writes; and one INFO record
    per closed entry, with its fields, when a handler takes INFO."""
    office = build_office(db_url, tasks=3)
    a, b, c = office.tasks
    with raw(db_url) as conn:
        digest = digest_of(on_enter(conn, office.review))
        for task in (a, c):
            place(conn, task, office.review)
        closing = [
            (task, seq, add_entry(conn, task, office.review, seq, digest), reason)
            for task, seq, reason in (
                (c, 1, "superseded"),
                (a, 2, "superseded"),
                (b, 1, "step_left"),  # b stands at Work
                (a, 1, "superseded"),
            )
        ]
        for task in (a, c):
            add_marker(conn, add_entry(conn, task, office.review, 3, digest), 0, CLEAR, "done")
        before = conn.execute(sa.select(sa.func.max(t.board_events.c.id))).scalar() or 0
    laneway_logs.clear()

    with open_host(db_url) as host:
        report = host.recovery_report.as_dict()

    assert report["skipped"] == {"superseded": 3, "step_left": 1}
    with raw(db_url) as conn:
        stored = conn.execute(
            sa.select(t.board_events.c.task_id, t.board_events.c.at, t.board_events.c.data)
            .where(t.board_events.c.type == "entry.marker", t.board_events.c.id > before)
            .order_by(t.board_events.c.id)
        ).all()
    ours = {entry_id for _task, _seq, entry_id, _reason in closing}
    stored = [row for row in stored if json.loads(row[2])["entry_id"] in ours]  # not a3's, c3's
    fields = ("entry_id", "position", "kind", "state", "reason")
    expected = [
        (
            task,
            events._encode(
                dict(zip(fields, (entry_id, position, kind, "skipped", reason), strict=True))
            ),
        )
        for task, _seq, entry_id, reason in sorted(closing)
        for position, kind in ((0, CLEAR), (1, FAN_OUT))
    ]
    assert [(task, data) for task, _at, data in stored] == expected
    # The scan walks the tasks in id order (ids made in one millisecond are in no set order)
    # and closes vacated entries in runs: a task whose newest entry it re-dispatches (a3,
    # c3) ends the run. One stamp per run.
    runs: list[set[str]] = [set()]
    for task in sorted((a, b, c)):
        runs[-1].add(task)
        if task in (a, c):
            runs.append(set())
    runs = [run for run in runs if run]
    for run in runs:
        assert len({at for task, at, _data in stored if task in run}) == 1, run
    assert len({at for _task, at, _data in stored}) == len(runs)
    for task, seq, _entry_id, reason in closing:
        assert records(laneway_logs, "INFO", task_id=task, entry_seq=seq, reason=reason)
    closed = [r for r in laneway_logs if r["message"] == "entry closed without running"]
    assert len(closed) == len(closing)


@attrs.define
class _Listening:
    """An observer that wants every event and keeps what it is handed, in order."""

    seen: list[events.Event] = attrs.field(factory=list)

    def wanted(self) -> bool:
        return True

    def committed(self, batch: Sequence[events.Event]) -> None:
        self.seen.extend(batch)

    def drain(self) -> None:
        return None


def test_ac_b9_a_batch_close_hands_an_observer_the_events_it_stores(db_url: str) -> None:
    """AC-B9(a1)/(a2), issue 14 target 3: with an observer listening (a plugin's
    `laneway_event`), the batch's `entry.marker` events go through the event log's flush, as
    every other write's do: the observer is handed each stored event, with its id, in order."""
    office = build_office(db_url, tasks=2)
    a, b = office.tasks
    with raw(db_url) as conn:
        digest = digest_of(on_enter(conn, office.review))
        place(conn, a, office.review)
        closing = [
            add_entry(conn, a, office.review, 1, digest),
            add_entry(conn, b, office.review, 1, digest),  # b stands at Work: step_left
        ]
        add_marker(conn, add_entry(conn, a, office.review, 2, digest), 1, FAN_OUT, "done")
        add_marker(conn, closing[-1], 0, CLEAR, "done")
    with open_host(db_url, recover=False) as host:
        listening = _Listening()
        host.store.observer = listening
        report = recovery.scan(host)
        stored = events.read_all(host.store)

    assert report.skipped == {"superseded": 1, "step_left": 1}
    seen = [e for e in listening.seen if e.data.get("entry_id") in closing]  # not a2's
    assert [(e.data["entry_id"], e.data["position"], e.data["reason"]) for e in seen] == [
        (closing[0], 0, "superseded"),
        (closing[0], 1, "superseded"),
        (closing[1], 1, "step_left"),
    ]
    by_id = {e.id: e for e in stored}
    assert all(e.id > 0 and by_id[e.id] == e for e in seen)
