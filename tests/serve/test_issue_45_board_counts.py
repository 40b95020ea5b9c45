"""Issue 45 item 5: the board's lane counts read once per page load, not once per lane request.

A lane's page asked with `?counts=0` reads no count of the workflow (its `counts` is null) and
is otherwise the same answer; without it `GET /api/board` answers as before (docs/serve.md).
The timing is `tests/benchmarks/bench_board_counts.py`. In-process: the app over a real
database, both databases."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from core import ids
from core.host import Host
from core.runs import RunRequest
from core.serve import board_view
from core.serve.app import build_app
from core.store import tables as t
from office_plugin import demo

TOKEN = "board-counts-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def board(host: Host, tmp_path: Path) -> Iterator[tuple[Host, TestClient, Any]]:
    built = demo.build_board(host, tmp_path / "agents")
    with TestClient(build_app(host, token=TOKEN)) as client:
        yield host, client, built


def _counting_statements(host: Host) -> tuple[list[str], Any]:
    """The statements that count tasks per lane, as the host's engine runs them."""
    seen: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        text = " ".join(statement.split()).lower()
        if "count(" in text and "group by tasks.workflow_step_id" in text:
            seen.append(text)

    return seen, before


def _cards(host: Host, wf_id: str, n: int) -> None:
    """`n` cards, every other one moved on to Work."""
    for i in range(n):
        made = host.tasks.create(workflow=wf_id, title=f"Lane {i}")
        if i % 2:
            host.tasks.move(made.id, "Work")


def test_issue_45_item_5_a_lane_page_with_counts_0_reads_no_count(
    board: tuple[Host, TestClient, Any],
) -> None:
    host, client, built = board
    wf = built.workflow
    _cards(host, wf.id, 5)
    engine = host.store.engine
    seen, before = _counting_statements(host)
    sa.event.listen(engine, "before_cursor_execute", before)
    try:
        params = {"workflow": wf.id, "step": "Work", "limit": "2"}
        counted = client.get("/api/board", params=params, headers=AUTH).json()
        assert len(seen) == 1  # the contract's answer still counts (docs/serve.md)
        lane = client.get("/api/board", params={**params, "counts": "0"}, headers=AUTH).json()
        assert len(seen) == 1  # ... and the lane's page with counts=0 did not
    finally:
        sa.event.remove(engine, "before_cursor_execute", before)
    assert lane["counts"] is None
    whole = client.get("/api/board", params={"workflow": wf.id}, headers=AUTH).json()
    work_id = next(s.id for s in wf.steps if s.name == "Work")
    in_work = [c for c in whole["tasks"] if c["workflow_step_id"] == work_id]
    assert counted["counts"] == whole["counts"]
    assert sum(counted["counts"][work_id].values()) == len(in_work) >= 2
    assert {k: v for k, v in lane.items() if k != "counts"} == {
        k: v for k, v in counted.items() if k != "counts"
    }
    assert set(lane) == set(counted)  # the same keys: an extension, not a new shape
    cards, page = list(lane["tasks"]), lane
    while page["next_cursor"]:
        more = {**params, "counts": "0", "cursor": page["next_cursor"]}
        page = client.get("/api/board", params=more, headers=AUTH).json()
        assert page["counts"] is None
        cards += page["tasks"]
    assert [c["id"] for c in cards] == [c["id"] for c in in_work]
    bad = client.get("/api/board", params={"workflow": wf.id, "counts": "no"}, headers=AUTH)
    assert (bad.status_code, bad.json()["error"]) == (
        400,
        "query 'counts': expected 0 or 1, got 'no'",
    )


def _lane_page_statements(host: Host, wf_id: str) -> tuple[int, dict[str, Any]]:
    """The statements one lane page (`?step=Review&limit=200&counts=0`) runs, and its answer: the
    route as serve runs it, in this thread (no stream pump beside it to count)."""
    from core.serve import routes
    from core.serve.http import Call, _answer

    ran: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        ran.append(statement)

    query = {"workflow": wf_id, "step": "Review", "limit": "200", "counts": "0"}
    sa.event.listen(host.store.engine, "before_cursor_execute", before)
    try:
        response = _answer(routes.board, Call(host=host, path={}, query=query, body=None, raw=b""))
    finally:
        sa.event.remove(host.store.engine, "before_cursor_execute", before)
    assert response.status_code == 200
    return len(ran), json.loads(bytes(response.body))


@pytest.mark.one_database
def test_issue_45_item_5_a_lane_page_reads_its_badges_in_one_statement(
    board: tuple[Host, TestClient, Any],
) -> None:
    """A lane's first page is its cards, one statement for every badge, seat and profile over
    them, one for the queue ahead of a queued card and one for the budgets: 4 statements
    whatever the number of cards and badges (it was 19, each badge read on its own)."""
    host, _client, built = board
    wf = built.workflow
    made = [host.tasks.create(workflow=wf.id, title=f"Card {n}") for n in range(12)]
    for task in made[:2]:
        host.tasks.move(task.id, "Review")
    review = next(s.id for s in wf.steps if s.name == "Review")
    agent = host.profiles.list()[0].id
    # a queued card: the queue ahead of it is read too
    host.runs.enqueue(RunRequest(agent, made[0].id, review, "task_assigned"))
    few, answer = _lane_page_statements(host, wf.id)
    assert len(answer["tasks"]) == 2
    assert answer["tasks"][0]["badges"]["queued"] is True
    for task in made[2:]:
        host.tasks.move(task.id, "Review")
    host.blockers.block(made[1].id, made[2].id)
    many, answer = _lane_page_statements(host, wf.id)
    assert len(answer["tasks"]) == 12
    assert [b["id"] for b in answer["tasks"][1]["badges"]["blockers"]] == [made[2].id]
    assert few == many == 4


def test_issue_45_item_5_a_pages_lanes_asked_at_once_on_a_new_shape_all_answer(
    board: tuple[Host, TestClient, Any],
) -> None:
    """The page asks for all its lanes at once; the first requests of a shape share one new
    badge read. Compiled on several threads together, it now and then failed ("Can't
    determine which FROM clause to join from") and a lane answered 500 (CI's page tests);
    the statements of a shape are now built and compiled once, under a lock, first. Here:
    every step's lane from its own thread, threads switching as often as Python allows, on a
    cleared statement cache, several times; every answer is the same as one asked alone."""
    import sys
    import threading

    from core.serve import board_view

    host, _client, built = board
    wf = built.workflow
    _cards(host, wf.id, 6)
    steps = [s.id for s in wf.steps]

    def lane(step: str) -> dict[str, Any]:
        with host.store.read() as conn:
            query = board_view.BoardQuery(step_id=step, limit=100, counts=False)
            return board_view.read(conn, host.workflows.get(wf.id), query, lambda: None)

    alone = {step: lane(step) for step in steps}
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(5):
            board_view._statements.cache_clear()
            answers: dict[str, Any] = {}
            start = threading.Barrier(len(steps))

            def ask(step: str, start: threading.Barrier, answers: dict[str, Any]) -> None:
                start.wait()
                try:
                    answers[step] = lane(step)
                except Exception as exc:  # noqa: BLE001 - the failure is what is counted
                    answers[step] = exc

            threads = [threading.Thread(target=ask, args=(step, start, answers)) for step in steps]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert answers == alone
    finally:
        sys.setswitchinterval(switch)


def test_issue_45_item_5_a_lane_pages_badge_read_probes_its_cards_rows_not_whole_tables(
    board: tuple[Host, TestClient, Any],
) -> None:
    """A full lane page's badge read finds its cards' runs and sessions through their task
    indexes, however many rows of other cards the tables hold and whatever the database knows
    of them: here 10,000 other cards with a run and a session each, analysed (the size of
    `bench_board_counts`' runs). Asked `task_id IN (SELECT … FROM the page)`, PostgreSQL chose
    a scan of each whole table over a probe per card (12 ms of a lane page's 23 at 100,000
    tasks); SQLite searches the indexes either way."""
    host, _client, built = board
    wf = built.workflow
    first = host.tasks.create(workflow=wf.id, title="Card")
    agent = host.profiles.list()[0].id
    stamp = ids.now()
    review = next(s.id for s in wf.steps if s.name == "Review")
    lane = [ids.new_id() for _ in range(200)]  # a full first page
    others = [ids.new_id() for _ in range(10_000)]
    with host.store.transaction() as uow:
        uow.conn.execute(
            sa.insert(t.tasks),
            [
                {
                    "id": task_id,
                    "workspace_id": first.workspace_id,
                    "workflow_id": wf.id,
                    "workflow_step_id": review if task_id in lane else wf.steps[0].id,
                    "title": "a card",
                    "description": "",
                    "state": "TODO",
                    "created_at": stamp,
                    "updated_at": stamp,
                }
                for task_id in (*lane, *others)
            ],
        )
        uow.conn.execute(
            sa.insert(t.runs),
            [
                {
                    "id": ids.new_id(),
                    "agent_profile_id": agent,
                    "task_id": others[n],
                    "reason": "test",
                    "status": ("done", "failed")[n % 2],
                    "requested_at": stamp,
                }
                for n in range(10_000)
            ],
        )
        uow.conn.execute(
            sa.insert(t.task_sessions),
            [
                {
                    "id": ids.new_id(),
                    "task_id": others[n],
                    "agent_profile_id": agent,
                    "state": "COMPLETED",
                    "metadata": "{}",
                    "started_at": stamp,
                    "updated_at": stamp,
                }
                for n in range(10_000)
            ],
        )
    seen: list[tuple[str, Any]] = []

    def keep(_c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any, _many: Any) -> None:
        if statement.startswith("WITH board_page"):
            seen.append((statement, parameters))

    with host.store.read() as conn:
        if not host.store.is_sqlite:
            conn.exec_driver_sql("ANALYZE runs, task_sessions, tasks")
        sa.event.listen(host.store.engine, "before_cursor_execute", keep)
        try:
            answer = board_view.read(
                conn, wf, board_view.BoardQuery(step_id=review, limit=200, counts=False), _go_on
            )
        finally:
            sa.event.remove(host.store.engine, "before_cursor_execute", keep)
        assert sorted(card["id"] for card in answer["tasks"]) == sorted(lane)
        assert len(seen) == 1
        statement, parameters = seen[0]
        explain = "EXPLAIN QUERY PLAN" if host.store.is_sqlite else "EXPLAIN"
        rows = conn.exec_driver_sql(f"{explain} {statement}", parameters).all()
    plan = "\n".join(" ".join(str(cell) for cell in row) for row in rows)
    for table in ("runs", "task_sessions"):
        if host.store.is_sqlite:
            assert not re.search(rf"SCAN {table}\b(?! USING)", plan), plan
        else:
            assert not re.search(rf"Seq Scan on {table}\b", plan), plan
            assert re.search(rf"Index Scan using \w+ on {table}\b", plan), plan


def _go_on() -> None:
    return None
