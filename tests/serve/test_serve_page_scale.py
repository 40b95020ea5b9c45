"""A 10,000-task board on the page (issue 28, "Tests": first lanes visible within 2 s,
scrolling loads the rest), in Debian's chromium against a real `laneway serve` on a real
SQLite file. The tasks go in as one bulk INSERT through the store's tables (10,000 API calls
would cost more than the test); the page reads each lane a page at a time
(`GET /api/board?workflow=W&step=S&limit=N&cursor=C`) and the next page when the lane's end
comes into view."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from core import ids
from core.store import tables as t
from office_plugin import demo
from tests.conftest import open_host
from tests.serve.conftest import Served, laneway, start_serve
from tests.serve.page_kit import browser
from tests.serve.test_serve_page import _lane

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the module's browser fixture, used by name

TASKS = 10_000
PAGE = 100  # board.js's PAGE: cards per lane per read


@attrs.frozen
class Big:
    served: Served
    workflow_id: str
    steps: dict[str, str]
    """step name -> id"""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Big]:
    tmp = tmp_path_factory.mktemp("big")
    db = f"sqlite:///{tmp / 'board.db'}"
    laneway(db, "init")
    with open_host(db) as host:
        built = demo.build_board(host, tmp / "agents")
        wf = built.workflow
        workspace = host.tasks.get(built.task_id).workspace_id
        order = [s.id for s in sorted(wf.steps, key=lambda s: s.position)]
        base = ids.now_micros()
        rows = []
        for n in range(TASKS):
            stamp = ids.at_micros(base + n)
            rows.append(
                {
                    "id": ids.new_id(),
                    "workspace_id": workspace,
                    "workflow_id": wf.id,
                    "workflow_step_id": order[n % len(order)],
                    "wip_admitted": True,
                    "title": f"Card {n:05d}",
                    "description": "",
                    "state": "TODO",
                    "created_at": stamp,
                    "updated_at": stamp,
                }
            )
        with host.store.transaction() as uow:
            uow.conn.execute(sa.insert(t.tasks), rows)
        steps = {s.name: s.id for s in wf.steps}
    served = start_serve(db, tmp)
    try:
        yield Big(served=served, workflow_id=wf.id, steps=steps)
    finally:
        served.stop()


def test_a_10000_task_board_shows_its_first_lanes_within_2_s_and_scrolling_loads_more(
    browser: Any, big: Big
) -> None:
    """Issue 28: from navigation to the first lane's cards on screen (in under 2 s on a quiet
    machine: printed, not asserted, issue 38 item 20); each lane
    holds its first page, not its 2,000 cards; its header counts every card of it; scrolling
    to a lane's end loads its next page, following on from the first."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    started = time.monotonic()
    page.goto(f"{big.served.url}/#token={big.served.token}")
    backlog = _lane(page, "Backlog")
    backlog.locator(".card").first.wait_for(state="visible", timeout=30_000)
    shown_in = time.monotonic() - started
    # the speed of a lane's first page is tests/benchmarks/bench_serve_board.py's figure; a
    # timed bound here fails on a loaded machine (issue 38 item 20)
    print(f"first cards after {shown_in:.2f} s")
    _lane(page, "Work").locator(".card").first.wait_for(state="visible", timeout=30_000)

    with big.served.client() as c:
        counts = c.get(f"/api/board?workflow={big.workflow_id}&limit=1").json()["counts"]
    here = counts[big.steps["Backlog"]]["admitted"]
    assert here >= TASKS // len(big.steps)  # the bulk rows, and the demo's task if it is here
    assert backlog.locator(".card").count() == PAGE
    assert page.locator(".card").count() == PAGE * len(big.steps)
    assert backlog.locator(".wip").inner_text().split(" /")[0] == str(here)
    assert backlog.locator(".lane-more").inner_text().startswith(f"Showing {PAGE} of {here}")
    assert page.locator("#summary").inner_text().startswith(f"{TASKS + 1} tasks")

    backlog.locator(".lane-more").scroll_into_view_if_needed()
    deadline = time.monotonic() + 10
    while backlog.locator(".card").count() < 2 * PAGE:
        assert time.monotonic() < deadline, "scrolling loaded no more cards"
        time.sleep(0.05)
    titles = backlog.locator(".card").evaluate_all("cards => cards.map(c => c.dataset.title)")
    assert len(set(titles)) == len(titles)  # pages follow on, none repeated
    assert [t for t in titles if t.startswith("Card ")] == sorted(
        t for t in titles if t.startswith("Card ")
    )  # oldest first, in order across pages
    assert errors == []
    ctx.close()
