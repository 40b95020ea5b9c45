"""Issue 24 over HTTP (HTTP.md rows; the app in-process on both databases): `POST /api/tasks`
takes `parent`; `GET /api/tasks/{t}` and `/api/board` tasks carry `parent_id` and
`blocked_by` (and, on the board, `over_budget`); `POST /api/tasks/{t}/block` / `unblock`
(`{"by"}`) as `task block` / `unblock`; `GET /api/costs?task=T&profile=P` as `costs`;
`GET`/`POST /api/budgets` as `budget list` / `budget set`. A move made through the API
fires the parent's on_children_completed and the blocked task's on_blocker_resolved once."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from core.serve.app import build_app
from tests.cli.conftest import Laneway
from tests.cli.test_cli_subtasks import office_board
from tests.conftest import open_host

TOKEN = "t0ken"


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def test_relations_costs_and_budgets_over_http(db_url: str) -> None:
    lw = Laneway(db_url)
    lw.json("init")
    wf = office_board(lw)
    with open_host(db_url) as host, TestClient(build_app(host, token=TOKEN)) as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        parent = ok(c.post("/api/tasks", json={"workflow": wf, "title": "epic"}), 201)
        ok(c.post(f"/api/tasks/{parent['id']}/move", json={"step": "Work"}))
        child = ok(
            c.post("/api/tasks", json={"workflow": wf, "title": "c", "parent": parent["id"]}),
            201,
        )
        blocker = ok(c.post("/api/tasks", json={"workflow": wf, "title": "b"}), 201)
        assert child["parent_id"] == parent["id"]
        shown = ok(c.post(f"/api/tasks/{parent['id']}/block", json={"by": blocker["id"]}))
        assert shown["blocked_by"] == [blocker["id"]]
        assert ok(c.get(f"/api/tasks/{parent['id']}"))["blocked_by"] == [blocker["id"]]
        cycle = c.post(f"/api/tasks/{blocker['id']}/block", json={"by": parent["id"]})
        assert cycle.status_code == 409
        assert "cycle" in cycle.json()["error"]

        board = ok(c.get("/api/board", params={"workflow": wf}))
        cards = {t["id"]: t for t in board["tasks"]}
        assert cards[child["id"]]["parent_id"] == parent["id"]
        assert cards[parent["id"]]["blocked_by"] == [blocker["id"]]
        assert cards[parent["id"]]["over_budget"] is False

        ok(c.post(f"/api/tasks/{child['id']}/move", json={"step": "Done"}))
        ok(c.post(f"/api/tasks/{blocker['id']}/move", json={"step": "Done"}))
        runs = ok(c.get("/api/runs", params={"task": parent["id"]}))
        reasons = sorted(r["reason"] for r in runs)
        assert reasons.count("children_completed") + reasons.count("blockers_resolved") >= 1
        fired = [r for r in runs if r["reason"] in ("children_completed", "blockers_resolved")]
        # both triggers fired once each (the second joined the queued run of the same agent)
        assert sum(r["coalesced_count"] for r in fired) == 2

        # costs: what a run reported, summed per task and profile
        run_id = runs[0]["id"]
        host.runs.record_usage(run_id, {"cost_usd": 0.25, "input_tokens": 10, "output_tokens": 4})
        costs = ok(c.get("/api/costs", params={"task": parent["id"]}))
        assert costs == {"cost_usd": 0.25, "input_tokens": 10, "output_tokens": 4, "runs": 1}
        profile = runs[0]["agent_profile_id"]
        assert ok(c.get("/api/costs", params={"profile": profile}))["cost_usd"] == 0.25
        assert ok(c.get("/api/costs", params={"task": child["id"]}))["runs"] == 0

        budget = ok(
            c.post(
                "/api/budgets",
                json={"scope": "task", "ref": parent["id"], "limit_usd": 0.2},
            ),
            201,
        )
        assert (budget["scope"], budget["ref"], budget["period"]) == ("task", parent["id"], "total")
        assert budget["thresholds"] == [80, 100]
        assert [b["id"] for b in ok(c.get("/api/budgets"))] == [budget["id"]]
        board = ok(c.get("/api/board", params={"workflow": wf}))
        assert {t["id"]: t["over_budget"] for t in board["tasks"]}[parent["id"]] is True
        bad = c.post("/api/budgets", json={"scope": "task", "ref": parent["id"], "limit_usd": "x"})
        assert bad.status_code == 400
