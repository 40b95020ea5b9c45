"""`GET /api/board` as a read model (issue 28): the badges of every card from a few set-based
queries, the same as the services say card by card, on SQLite and PostgreSQL; paged and
filtered by `?step=`, `?q=`, `?limit=` and `?cursor=` (docs/serve.md); and a board call whose
client went away stops instead of reading on. In-process: the app over a real database."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from core import ids
from core.host import Host
from core.logs import logger
from core.model import WORKING_STATES, Task
from core.serve import board_view
from core.serve.app import build_app
from core.serve.http import Call
from core.store import tables as t
from office_plugin import demo

TOKEN = "board-view-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def board(host: Host, tmp_path: Path) -> Iterator[tuple[Host, TestClient, Any]]:
    built = demo.build_board(host, tmp_path / "agents")
    with TestClient(build_app(host, token=TOKEN)) as client:
        yield host, client, built


def _insert_run(host: Host, task_id: str, agent: str, status: str, error: str | None = None) -> str:
    run_id = ids.new_id()
    with host.store.transaction() as uow:
        uow.conn.execute(
            sa.insert(t.runs).values(
                id=run_id,
                agent_profile_id=agent,
                task_id=task_id,
                reason="test",
                status=status,
                requested_at=ids.now(),
                error_message=error,
            )
        )
    return run_id


def _reference_badges(host: Host, task: Task) -> dict[str, Any]:
    """What the services say of one card: the per-card calls the read model replaced."""
    sessions = host.sessions.list(task=task.id)
    entries = host.entries.list(task=task.id)
    here = [(e, m) for e, m in entries if e.step_id == task.workflow_step_id]
    latest = max(here, key=lambda pair: pair[0].entry_seq) if here else None
    runs = host.runs.list(task=task.id)
    approved = required = 0
    if task.workflow_step_id is not None:
        standing = {
            d.participant_id: d
            for d in host.decisions.list(task.id, task.workflow_step_id)
            if d.superseded_at is None
        }
        deciding = [
            s
            for s in host.participants.seats_at(task.id, task.workflow_step_id)
            if s.decision_required
        ]
        required = len(deciding)
        approved = sum(
            1 for s in deciding if s.id in standing and standing[s.id].decision == "approved"
        )
    queued = [r for r in runs if r.status == "queued"]
    behind = 0
    if queued:
        mine = queued[0]
        behind = sum(
            1
            for r in host.runs.list(status="queued")
            if r.agent_profile_id == mine.agent_profile_id
            and (r.requested_at, r.id) < (mine.requested_at, mine.id)
        )
    last = runs[-1] if runs else None
    children = [c for c in host.tasks.list(workflow=task.workflow_id) if c.parent_id == task.id]
    return {
        "running": any(r.status == "claimed" for r in runs)
        or any(s.state in WORKING_STATES for s in sessions),
        "decisions": {"approved": approved, "required": required},
        "open_entry": any(not e.terminal for e, _m in entries),
        "failed_marker": latest is not None and any(m.state == "failed" for m in latest[1]),
        "dead_session": bool(sessions) and sessions[-1].state == "FAILED",
        "dead_run": any(r.status == "dead" for r in runs),
        "waiting_for_person": bool(
            host.permissions.list(task=task.id, state="pending")
            or host.questions.list(task=task.id, state="pending")
        ),
        "questions": len(host.questions.list(task=task.id, state="pending")),
        "needs_person": _person_waits(host, task.id),
        "queued": bool(queued),
        "queued_behind": behind,
        "waits_for_host": host.runs.waits_for_host(queued[:1]).get(queued[0].id)
        if queued
        else None,
        "last_error": last.error_message if last is not None and last.status == "failed" else None,
        "last_run": last.status if last is not None else None,
        "blockers": [
            {"id": b.id, "title": b.title, "state": b.state}
            for b in host.blockers.unfinished(task.id)
        ],
        "subtasks": {
            "done": sum(1 for c in children if c.state in ("COMPLETED", "FAILED", "CANCELLED")),
            "total": len(children),
        },
    }


def test_board_badges_match_what_the_services_say_card_by_card(
    board: tuple[Host, TestClient, Any],
) -> None:
    """Issue 28, a read model for the board: every badge the page shows today plus
    waiting_for_person, queued_behind and last_error, from set-based queries, equal to the
    per-card service calls on both databases."""
    host, client, built = board
    wf = built.workflow
    agent = host.profiles.list()[0].id
    made = [host.tasks.create(workflow=wf.id, title=f"Card {n}").id for n in range(8)]
    running, failed_session, reviewed, asking, queued_a, queued_b, errored, dead = made
    host.tasks.move(running, "Work")
    session = host.sessions.start(running)
    host.sessions.set_state(session.id, "RUNNING")
    broken = host.sessions.start(failed_session)
    host.sessions.set_state(broken.id, "FAILED", error="agent exited with status 2")
    host.tasks.move(reviewed, "Review")
    seats = host.participants.list(step="Review", workflow=wf.id)
    host.decisions.record(reviewed, "Review", seats[0].id, "approved", comment="fine")
    asked = host.sessions.start(asking)
    host.permissions.request(asking, asked.id, run_id=None, tool_call={"title": "rm"}, options=[])
    # The queue: another task's run first, then queued_a's, then queued_b's, one agent.
    _insert_run(host, built.task_id, agent, "queued")
    _insert_run(host, queued_a, agent, "queued")
    _insert_run(host, queued_b, agent, "queued")
    _insert_run(host, errored, agent, "failed", error="first failure")
    _insert_run(host, errored, agent, "failed", error="the agent ran out of time")
    _insert_run(host, dead, agent, "dead")
    host.tasks.archive(host.tasks.create(workflow=wf.id, title="Archived").id)
    with host.store.transaction() as uow:  # an entry action of the reviewed card failed
        entries = sa.select(t.step_entries.c.id).where(t.step_entries.c.task_id == reviewed)
        marked = t.step_entry_markers
        uow.conn.execute(
            sa.update(marked).where(marked.c.entry_id.in_(entries)).values(state="failed")
        )
        # ... and its entry is still open (no worker ran here to finish it)
        uow.conn.execute(
            sa.update(t.step_entries)
            .where(t.step_entries.c.task_id == reviewed)
            .values(terminal=False)
        )

    answer = client.get("/api/board", params={"workflow": wf.name}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    cards = {c["id"]: c for c in body["tasks"]}
    live = [x for x in host.tasks.list(workflow=wf.id) if x.archived_at is None]
    assert [c["id"] for c in body["tasks"]] == [x.id for x in live]
    for task in live:
        assert cards[task.id]["badges"] == _reference_badges(host, task), task.title
        assert cards[task.id]["title"] == task.title
        assert cards[task.id]["wip_admitted"] == task.wip_admitted
    # and the cases above say what they were built to say
    assert cards[running]["badges"]["running"] is True
    assert cards[reviewed]["badges"]["failed_marker"] is True
    assert cards[reviewed]["badges"]["open_entry"] is True
    assert cards[failed_session]["badges"]["dead_session"] is True
    assert cards[reviewed]["badges"]["decisions"]["approved"] == 1
    assert cards[reviewed]["badges"]["decisions"]["required"] >= 1
    assert cards[asking]["badges"]["waiting_for_person"] is True
    assert (
        cards[queued_a]["badges"]["queued_behind"],
        cards[queued_b]["badges"]["queued_behind"],
    ) == (1, 2)
    assert cards[errored]["badges"]["last_error"] == "the agent ran out of time"
    assert cards[dead]["badges"]["dead_run"] is True
    assert body["profiles"][agent]["name"]
    assert body["next_cursor"] is None
    lanes = body["counts"]
    assert sum(n["admitted"] + n["queued"] for n in lanes.values()) == len(live)


def test_issue_45_item_5_a_lane_page_counts_the_queue_ahead_of_each_card(
    board: tuple[Host, TestClient, Any],
) -> None:
    """Issue 45 item 5: a lane's page reads the run queue only up to its own last queued run
    and its runs by task, not by state; each card's run badges and `queued_behind` still
    equal what the services say, page after page, with runs of another agent and of later
    cards queued between and after them."""
    host, client, built = board
    wf = built.workflow
    agent = host.profiles.list()[0].id
    other = host.profiles.add(name="other", command="true").id
    made = [host.tasks.create(workflow=wf.id, title=f"Queued {n}").id for n in range(5)]
    lane = host.tasks.get(made[0]).workflow_step_id
    for n, task_id in enumerate(made):
        _insert_run(host, task_id, other, "queued")
        _insert_run(host, task_id, agent, "queued")
        if n % 2:
            _insert_run(host, task_id, agent, "claimed")
    _insert_run(host, made[0], agent, "queued")  # a second queued run of the first card
    pages: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"workflow": wf.id, "step": lane, "limit": "2", "counts": "0"}
        answer = client.get(
            "/api/board", params={**params, **({"cursor": cursor} if cursor else {})}, headers=AUTH
        )
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        cursor = pages[-1]["next_cursor"]
        if cursor is None:
            break
    cards = [card for page in pages for card in page["tasks"]]
    assert [c["id"] for c in cards if c["id"] in made] == made
    for card in cards:
        assert card["badges"] == _reference_badges(host, host.tasks.get(card["id"])), card["title"]
    behind = {c["id"]: c["badges"]["queued_behind"] for c in cards if c["id"] in made}
    assert [behind[task_id] for task_id in made] == [0, 1, 2, 3, 4]
    assert all(page["counts"] is None for page in pages)


def test_issue_38_item_12_a_failure_a_later_run_made_good_leaves_no_error_badge(
    board: tuple[Host, TestClient, Any],
) -> None:
    """Issue 38 items 11, 12 and 15 (the read model): `last_error` is the latest run's error
    only (the demo's finished task does not keep a red badge), `last_run` says a cancelled
    one, and the blockers that still hold a card and its subtasks' count come with it."""
    host, client, built = board
    wf = built.workflow
    agent = host.profiles.list()[0].id
    healed, cancelled, failing, blocked, gate, parent = (
        host.tasks.create(workflow=wf.id, title=f"Card {n}").id for n in range(6)
    )
    _insert_run(host, healed, agent, "failed", error="first try died")
    _insert_run(host, healed, agent, "finished")
    _insert_run(host, cancelled, agent, "cancelled")
    _insert_run(host, failing, agent, "finished")
    _insert_run(host, failing, agent, "failed", error="the second one failed")
    host.blockers.block(blocked, gate)
    done_child = host.tasks.create(workflow=wf.id, title="child 1", parent=parent).id
    host.tasks.create(workflow=wf.id, title="child 2", parent=parent)
    host.tasks.move(done_child, "Done")

    answer = client.get("/api/board", params={"workflow": wf.name}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    cards = {c["id"]: c["badges"] for c in answer.json()["tasks"]}
    assert (cards[healed]["last_error"], cards[healed]["last_run"]) == (None, "finished")
    assert cards[cancelled]["last_run"] == "cancelled"
    assert cards[failing]["last_error"] == "the second one failed"
    assert [b["id"] for b in cards[blocked]["blockers"]] == [gate]
    assert cards[blocked]["needs_person"] == ["blocked"]  # issue 42 item 3: the tab counts it
    assert cards[gate]["needs_person"] == []
    assert cards[parent]["subtasks"] == {"done": 1, "total": 2}
    # a blocked task does not start: the page's Start (`task start` over HTTP) is refused
    refused = client.post(f"/api/tasks/{blocked}/start", json={}, headers=AUTH)
    assert refused.status_code == 409, refused.text
    assert f"blocked by {gate}" in refused.json()["error"]
    host.tasks.move(gate, "Done")
    again = client.get("/api/board", params={"workflow": wf.name}, headers=AUTH).json()
    assert {c["id"]: c["badges"] for c in again["tasks"]}[blocked]["blockers"] == []
    assert {c["id"]: c["badges"] for c in again["tasks"]}[blocked]["needs_person"] == []


def test_board_pages_with_a_cursor_and_filters_by_step_and_search(
    board: tuple[Host, TestClient, Any],
) -> None:
    """docs/serve.md, paging the board: `?limit=` pages in the unpaged order, the cursor
    continues where a page ended, `?step=` keeps one lane, `?q=` searches the title, the
    description and the id's end; bad values are one-line 400s."""
    host, client, built = board
    wf = built.workflow
    for n in range(7):
        made = host.tasks.create(
            workflow=wf.id, title=f"Paged {n}", description="needle" if n == 3 else ""
        )
        if n % 2:
            host.tasks.move(made.id, "Work")
    whole = client.get("/api/board", params={"workflow": wf.id}, headers=AUTH).json()
    seen: list[str] = []
    cursor = None
    while True:
        params = {"workflow": wf.id, "limit": "3", **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/board", params=params, headers=AUTH).json()
        assert len(page["tasks"]) <= 3
        assert page["counts"] == whole["counts"]
        seen += [c["id"] for c in page["tasks"]]
        for card in page["tasks"]:
            assert card in whole["tasks"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [c["id"] for c in whole["tasks"]]

    work = client.get("/api/board", params={"workflow": wf.id, "step": "work"}, headers=AUTH).json()
    work_id = next(s.id for s in wf.steps if s.name == "Work")
    assert [c["id"] for c in work["tasks"]] == [
        c["id"] for c in whole["tasks"] if c["workflow_step_id"] == work_id
    ]
    assert work["tasks"]
    found = client.get("/api/board", params={"workflow": wf.id, "q": "NEEDLE"}, headers=AUTH).json()
    assert [c["title"] for c in found["tasks"]] == ["Paged 3"]
    one = whole["tasks"][0]["id"]
    by_id = client.get("/api/board", params={"workflow": wf.id, "q": one[-8:]}, headers=AUTH).json()
    assert [c["id"] for c in by_id["tasks"]] == [one]

    for params, said in (
        ({"limit": "0"}, "query 'limit': expected 1 to 1000, got 0"),
        ({"limit": "many"}, "query 'limit': expected a whole number, got 'many'"),
        ({"cursor": "not-a-cursor"}, "query 'cursor': not a cursor this server gave"),
    ):
        bad = client.get("/api/board", params={"workflow": wf.id, **params}, headers=AUTH)
        assert (bad.status_code, bad.json()["error"]) == (400, said)
    nostep = client.get("/api/board", params={"workflow": wf.id, "step": "Nowhere"}, headers=AUTH)
    assert nostep.status_code == 404


def test_a_board_call_whose_client_went_away_stops_between_queries(
    board: tuple[Host, TestClient, Any],
) -> None:
    """Issue 28: work for a client that went away is cancelled. The read model checks between
    its statements; once the client is gone the next check ends the call."""
    host, _client, built = board
    for n in range(3):
        host.tasks.create(workflow=built.workflow.id, title=f"Gone {n}")
    gone = threading.Event()
    call = Call(host=host, path={}, query={}, body=None, raw=b"", gone=gone)
    checks = 0

    def check() -> None:
        nonlocal checks
        checks += 1
        if checks == 2:
            gone.set()
        call.check()

    from core.serve.http import ClientGone

    with host.store.read() as conn, pytest.raises(ClientGone):
        board_view.read(conn, built.workflow, board_view.BoardQuery(), check)
    assert checks == 2


def test_a_board_request_whose_client_disconnects_stops_with_a_debug_record(
    board: tuple[Host, TestClient, Any],
) -> None:
    """Issue 28: a board call abandoned by its client stops instead of computing on; the
    endpoint watches the connection while the read model works, and says so at DEBUG."""
    host, _client, built = board
    app = build_app(host, token=TOKEN)
    seen: list[dict[str, Any]] = []
    handler = logger.add(
        lambda m: seen.append({"level": m.record["level"].name, "message": m.record["message"]}),
        level="DEBUG",
    )
    logger.enable("core")

    async def abandoned() -> list[MutableMapping[str, Any]]:
        incoming: list[dict[str, Any]] = [{"type": "http.request", "body": b"", "more_body": False}]
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return incoming.pop(0) if incoming else {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/api/board",
            "raw_path": b"/api/board",
            "query_string": f"workflow={built.workflow.id}".encode(),
            "root_path": "",
            "headers": [(b"authorization", AUTH["Authorization"].encode())],
            "client": ("127.0.0.1", 5555),
            "server": ("127.0.0.1", 8765),
        }
        await app(scope, receive, send)
        return sent

    try:
        asyncio.run(abandoned())
    finally:
        logger.remove(handler)
    assert {"level": "DEBUG", "message": "client went away; the call stopped"} in seen
    assert not [r for r in seen if r["level"] in ("ERROR", "CRITICAL")]


def test_a_page_from_a_cursor_seeks_the_board_index_on_both_databases(
    host: Host, tmp_path: Path
) -> None:
    """Issue 28 (cost per task flat to 100,000): a lane's page and a workflow's page from a
    cursor read migration 0018's indexes from the cursor on (a range seek, no sort), as each
    database plans them (PostgreSQL told not to prefer a scan of this small table)."""
    built = demo.build_board(host, tmp_path / "agents")
    wf = built.workflow
    for n in range(5):
        host.tasks.create(workflow=wf.id, title=f"t{n}")
    assert wf.start_step is not None
    step = wf.start_step.id
    seen: list[tuple[str, Any]] = []

    def keep(_c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any, _many: Any) -> None:
        if statement.startswith("SELECT tasks.") and "LIMIT" in statement:
            seen.append((statement, parameters))

    with host.store.read() as conn:
        first = board_view.read(conn, wf, board_view.BoardQuery(step_id=step, limit=2), _go_on)
        assert first["next_cursor"] is not None
        after = board_view.decode_cursor(first["next_cursor"])
        sa.event.listen(host.store.engine, "before_cursor_execute", keep)
        try:
            for query in (
                board_view.BoardQuery(step_id=step, limit=2, after=after),
                board_view.BoardQuery(limit=2, after=after),
            ):
                board_view.read(conn, wf, query, _go_on)
        finally:
            sa.event.remove(host.store.engine, "before_cursor_execute", keep)
    assert len(seen) == 2
    plans = []
    with host.store.read() as conn:
        if not host.store.is_sqlite:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        for statement, parameters in seen:
            explain = "EXPLAIN QUERY PLAN" if host.store.is_sqlite else "EXPLAIN"
            rows = conn.exec_driver_sql(f"{explain} {statement}", parameters).all()
            plans.append(" ".join(str(cell) for row in rows for cell in row))
    lane, whole = plans
    assert "ix_tasks_step_created" in lane, lane
    assert "ix_tasks_workflow_created" in whole, whole
    for plan in plans:
        assert "TEMP B-TREE" not in plan.upper(), plan
        assert "Sort" not in plan, plan
        if host.store.is_sqlite:
            assert "(created_at,id)>(?,?)" in plan, plan
        else:
            assert re.search(r"Index Cond: .*ROW\(\(?created_at\)?[^)]*, \(?id\)?", plan), plan


def _go_on() -> None:
    return None


def _person_waits(host: Any, task_id: str) -> list[str]:
    """Issue 42 item 3: the reasons a task waits for a person beyond a permission."""
    waits = t.person_waits
    with host.store.read() as conn:
        return [
            str(r)
            for r in conn.execute(
                sa.select(waits.c.reason).where(waits.c.task_id == task_id).order_by(waits.c.reason)
            ).scalars()
        ]
