"""Issue 45 item 5: the board's lane counts read once per page load, not once per lane request.

A lane's page asked with `?counts=0` reads no count of the workflow (its `counts` is null) and
is otherwise the same answer; without it `GET /api/board` answers as before (docs/serve.md).
The timing is `tests/benchmarks/bench_board_counts.py`. In-process: the app over a real
database, both databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from core.host import Host
from core.serve.app import build_app
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


def test_issue_45_item_5_a_lane_page_with_counts_0_reads_no_count(
    board: tuple[Host, TestClient, Any],
) -> None:
    host, client, built = board
    wf = built.workflow
    for n in range(5):
        made = host.tasks.create(workflow=wf.id, title=f"Lane {n}")
        if n % 2:
            host.tasks.move(made.id, "Work")
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
