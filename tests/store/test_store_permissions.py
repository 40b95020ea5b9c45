"""The permission requests' store half (issue 22 item 2), on a real SQLite file and PostgreSQL:
CLI.md's *permission* (named by id or a unique suffix of at least 6 characters), `permission
allow|deny` decided by a conditional UPDATE (one of two racing answers wins, the other is a
Conflict naming the state), a run that ends or dies cancelling its pending requests, rows that
go with their task, and the waiting side learning of an answer at once (HTTP.md's events are
written in the row's transaction; PostgreSQL wakes the waiter through their NOTIFY)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import Host
from core.errors import Conflict, LanewayError, NotFound
from core.model import Permission
from core.store import events
from core.store import tables as t
from tests.agents.conftest import session_with_run
from tests.conftest import open_host

OPTIONS = [
    {"option_id": "yes", "name": "Allow", "kind": "allow_once"},
    {"option_id": "always", "name": "Always", "kind": "allow_always"},
    {"option_id": "no", "name": "Reject", "kind": "reject_once"},
]


def _asked(
    host: Host, tmp_path: Path, options: list[dict[str, Any]] = OPTIONS
) -> tuple[Permission, str]:
    """A pending request of a task's session, for a run: (request, run id)."""
    task, session, run = session_with_run(host, tmp_path, title="edit")
    asked = host.permissions.request(
        task,
        session,
        run_id=run,
        tool_call={"toolCallId": "t1", "title": "Edit a.py", "kind": "edit"},
        options=options,
    )
    return asked, run


def _events(host: Host) -> list[tuple[str, dict[str, Any]]]:
    with host.store.read() as conn:
        found = conn.execute(
            sa.select(t.board_events.c.type, t.board_events.c.data)
            .where(t.board_events.c.type.like("permission.%"))
            .order_by(t.board_events.c.id)
        ).all()
    return [(kind, json.loads(data)) for kind, data in found]


def test_a_request_is_pending_and_found_by_id_or_suffix(host: Host, tmp_path: Path) -> None:
    """CLI.md: a permission request is named by its id or a unique suffix of 6+ characters."""
    asked, run_id = _asked(host, tmp_path)
    assert (asked.state, asked.option_id, asked.decided_by, asked.run_id) == (
        "pending",
        None,
        None,
        run_id,
    )
    assert host.permissions.find(asked.id) == asked
    assert host.permissions.find(asked.id[-6:]) == asked
    with pytest.raises(NotFound, match="6"):
        host.permissions.find(asked.id[-5:])
    assert host.permissions.list(task=asked.task_id) == [asked]
    assert host.permissions.list(state="pending") == [asked]
    assert host.permissions.list(state="allowed") == []
    with pytest.raises(LanewayError, match="pending, allowed, denied, cancelled"):
        host.permissions.list(state="maybe")
    assert _events(host) == [
        ("permission.requested", {"permission_id": asked.id, "run_id": run_id, "state": "pending"})
    ]


def test_two_racing_answers_one_wins_the_other_is_told_the_state(
    db_url: str, tmp_path: Path
) -> None:
    """The answer is a conditional UPDATE: two hosts (as two processes) answering at once,
    exactly one wins; the other is a Conflict naming what the request became."""
    with open_host(db_url) as host:
        asked, _run = _asked(host, tmp_path)
    results: list[object] = []
    barrier = threading.Barrier(2)

    def answer(allow: bool) -> None:
        with open_host(db_url) as other:
            barrier.wait()
            try:
                results.append(other.permissions.answer(asked.id, allow, by=f"p{int(allow)}"))
            except Conflict as exc:
                results.append(exc)

    threads = [threading.Thread(target=answer, args=(flag,)) for flag in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    won = [r for r in results if isinstance(r, Permission)]
    lost = [r for r in results if isinstance(r, Conflict)]
    assert (len(won), len(lost)) == (1, 1)
    assert f"is already {won[0].state} by {won[0].decided_by}" in str(lost[0])
    with open_host(db_url) as host:
        assert host.permissions.get(asked.id) == won[0]
        resolved = [e for e in _events(host) if e[0] == "permission.resolved"]
        assert [e[1]["state"] for e in resolved] == [won[0].state]


def test_options_picked_and_refusals(host: Host, tmp_path: Path) -> None:
    """allow picks the first allow_once (allow_always with --always), deny the first
    reject_once/reject_always; an option the agent does not offer is a one-line error, and a
    deny with no reject option tells the agent `cancelled` (option_id None)."""
    asked, _run = _asked(host, tmp_path, options=[OPTIONS[1]])
    with pytest.raises(LanewayError, match="offers no allow_once option \\(it offers: allow_a"):
        host.permissions.answer(asked.id, True)
    with pytest.raises(LanewayError, match="'always' goes with allow"):
        host.permissions.answer(asked.id, False, always=True)
    with pytest.raises(LanewayError, match="'allow' must be bool"):
        host.permissions.answer(asked.id, "yes")  # type: ignore[arg-type]
    denied = host.permissions.answer(asked.id, False, by="alice")
    assert (denied.state, denied.option_id, denied.decided_by) == ("denied", None, "alice")
    assert denied.decided_at


def test_a_run_ending_or_dying_cancels_only_its_pending_requests(
    host: Host, tmp_path: Path
) -> None:
    """A run that ends while a request is pending (or whose worker died) cancels it, with its
    event; an answered request keeps its answer; a cancel is refused later answers."""
    asked, run_id = _asked(host, tmp_path)
    other = host.permissions.request(
        asked.task_id, asked.session_id, run_id="another-run", tool_call={}, options=OPTIONS
    )
    assert host.permissions.cancel_pending(run_id=run_id, by="worker_died") == [asked.id]
    assert host.permissions.cancel_pending(run_id=run_id) == []
    gone = host.permissions.get(asked.id)
    assert (gone.state, gone.decided_by) == ("cancelled", "worker_died")
    assert host.permissions.get(other.id).state == "pending"
    with pytest.raises(Conflict, match="already cancelled by worker_died"):
        host.permissions.answer(asked.id, True)
    said = {"permission_id": asked.id, "run_id": run_id, "state": "cancelled"}
    assert ("permission.resolved", said) in _events(host)
    allowed = host.permissions.answer(other.id, True)
    assert not host.permissions.cancel(other.id, by="turn_ended")
    assert host.permissions.get(other.id) == allowed


def test_requests_go_with_their_task(host: Host, tmp_path: Path) -> None:
    asked, _run = _asked(host, tmp_path)
    host.tasks.delete(asked.task_id)
    assert host.permissions.list() == []
    with pytest.raises(NotFound):
        host.permissions.get(asked.id)


def test_the_waiting_side_learns_of_an_answer_at_once(db_url: str, tmp_path: Path) -> None:
    """Issue 22: the waiting worker learns of an answer at once: PostgreSQL's NOTIFY wakes
    it (well inside the 2 s re-check it falls back on), SQLite's wake-up socket likewise
    (issue 45 item 3); `stop()` ends the wait with the request still pending."""
    with open_host(db_url) as host:
        asked, _run = _asked(host, tmp_path)
        listening = events.Commits(host.store)
        assert listening.listening
        listening.close()
        stopped = host.permissions.wait(asked.id, stop=lambda: True)
        assert stopped.state == "pending"
        seen: list[tuple[float, Permission]] = []
        waiter = threading.Thread(
            target=lambda: seen.append(
                (time.monotonic(), host.permissions.wait(asked.id, stop=lambda: False))
            )
        )
        waiter.start()
        time.sleep(0.5)
        with open_host(db_url) as other:
            answered_at = time.monotonic()
            other.permissions.answer(asked.id, True)
        waiter.join(10)
        assert seen, "the waiter never learned of the answer"
        woke, found = seen[0]
        assert found.state == "allowed"
        assert woke - answered_at < 1.0
