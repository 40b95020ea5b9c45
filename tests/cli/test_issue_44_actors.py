"""Issue 44 item 3 (and issue 42 item 5): every event and every row a person writes names
its actor. Two people act on one board, alice through the CLI (`$LANEWAY_USER`) and bob
through HTTP (his token): a move, a verdict, a permission answer and a comment each; the
events, the webhook bodies, the rows and `task history` name who did each, on both
databases. An agent's tool call names `agent:<profile>`; the engine's own work `system`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from core.agents.tools.broker import ToolBroker
from core.host import Host
from core.serve.app import build_app
from core.services.hooks import Deliverer
from core.store import events
from tests.agents.conftest import session_with_run
from tests.cli.conftest import Laneway
from tests.conftest import eventually, open_host
from tests.hooks.receiver import receiver
from tests.tools.board import review_board, reviewer_grant

ADMIN = "admin-token-0123456789"
ALICE = {"LANEWAY_USER": "alice"}
WATCHED = ("task.moved", "comment.added", "decision.recorded", "permission.resolved")
OPTIONS = [{"option_id": "yes", "name": "Allow", "kind": "allow_once"}]


def _board(lw: Laneway) -> dict[str, str]:
    lw.json("workflow", "create", "--template", "office-default")
    for name in ("rev-a", "rev-b"):
        lw.json("profile", "add", name, "--command", "agent --review", "--role", "reviewer")
    return {
        name: lw.json(
            "participant", "add", "--step", "Review", "--role", "reviewer",
            "--profile", name, "--workflow", "Office Default",
        )["id"]
        for name in ("rev-a", "rev-b")
    }  # fmt: skip


def test_issue_44_item_3_two_people_through_cli_and_http_name_their_actor(
    laneway: Laneway, tmp_path: Path
) -> None:
    lw = laneway
    seats = _board(lw)
    lw.json("user", "add", "bob", "--role", "operator")
    bob = lw.json("user", "token", "bob")["token"]
    x = lw.json("task", "create", "--workflow", "Office Default", "--title", "alice's")["id"]
    y = lw.json("task", "create", "--workflow", "Office Default", "--title", "bob's")["id"]
    with open_host(lw.url) as host:
        asked_task, session, run = session_with_run(host, tmp_path, title="asks")
        asks = [
            host.permissions.request(
                asked_task, session, run_id=run, tool_call={"title": f"edit {n}"}, options=OPTIONS
            )
            for n in (1, 2)
        ]
    with receiver() as rec:
        hook = lw.json("hook", "add", rec.url, "--events", ",".join(WATCHED))
        # alice, at the command line
        lw.json("task", "move", x, "Review", env=ALICE)
        lw.json("task", "comment", x, "from alice", env=ALICE)
        decide = ["--step", "Review", "--participant", seats["rev-a"], "--verdict", "approved"]
        lw.json("decision", "record", "--task", x, *decide, env=ALICE)
        lw.json("permission", "allow", asks[0].id, env=ALICE)
        # bob, over HTTP
        with open_host(lw.url) as host, TestClient(build_app(host, token=ADMIN)) as c:
            c.headers["Authorization"] = f"Bearer {bob}"
            assert c.post(f"/api/tasks/{y}/move", json={"step": "Review"}).status_code == 200
            made = c.post(f"/api/tasks/{y}/comments", json={"body": "from bob"})
            assert made.status_code == 201, made.text
            verdict = {"task": y, "step": "Review", "participant": seats["rev-a"]}
            answer = c.post("/api/decisions", json={**verdict, "verdict": "approved"})
            assert answer.status_code == 200, answer.text
            allowed = c.post(f"/api/permissions/{asks[1].id}", json={"outcome": "allow"})
            assert allowed.status_code == 200, allowed.text
            assert allowed.json()["actor"] == "user:bob"
            shown_history = c.get(f"/api/tasks/{y}/history").json()

            stored = events.read_all(host.store)
            with Deliverer(host.store):
                delivered = eventually(
                    lambda: (
                        len(lw.json("hook", "deliveries", "--state", "delivered")) >= 8
                        and lw.json("hook", "deliveries", "--hook", hook["id"])
                    ),
                    timeout=60,
                    what="the watched events delivered",
                )

    def of(found: list[dict[str, Any]], task: str, perm: str) -> dict[str, set[str]]:
        """The actors of the watched events of `task`, and of the permission answer `perm`."""
        actors: dict[str, set[str]] = {}
        for e in found:
            if e["type"] in WATCHED and (e["task_id"] == task or e.get("permission_id") == perm):
                actors.setdefault(e["type"], set()).add(e["actor"])
        return actors

    everything = [e.as_json() for e in stored]
    bodies = [json.loads(g.body) for g in rec.got]
    assert len({d["event_id"] for d in delivered}) == len(delivered)
    for who, task, perm in (("user:alice", x, asks[0].id), ("user:bob", y, asks[1].id)):
        expected = {kind: {who} for kind in WATCHED}
        assert of(everything, task, perm) == expected, who
        assert of(bodies, task, perm) == expected, who

    # rows: comments, verdicts, permission answers
    comments = {
        c["body"]: c["actor"]
        for c in (*lw.json("task", "comments", x), *lw.json("task", "comments", y))
    }
    assert comments == {"from alice": "user:alice", "from bob": "user:bob"}
    assert [d["actor"] for d in lw.json("decision", "list", "--task", x)] == ["user:alice"]
    assert [d["actor"] for d in lw.json("decision", "list", "--task", y)] == ["user:bob"]
    answered = {p["id"]: p["actor"] for p in lw.json("permission", "list", "--task", asked_task)}
    assert answered == {asks[0].id: "user:alice", asks[1].id: "user:bob"}

    # the task's history, at the command line and over HTTP
    history = lw.json("task", "history", x)
    assert {(e["type"], e["actor"]) for e in history if e["type"] == "task.moved"} == {
        ("task.moved", "user:alice")
    }
    assert {e["actor"] for e in shown_history if e["type"] == "task.moved"} == {"user:bob"}
    # what the engine does by itself (creating the sessions' task here, in this process) is
    # the system's, and the CLI's person does not leak into the next caller
    created = [e for e in everything if e["type"] == "task.created" and e["task_id"] == asked_task]
    assert [e["actor"] for e in created] == ["system"]


def test_issue_44_item_3_an_agents_tool_calls_name_its_profile(host: Host) -> None:
    """The tool server's writes are `agent:<profile>`'s: its comment and its verdict, in the
    rows and in their events; the engine's work around them stays the system's."""
    board = review_board(host, reviewers=2)
    with ToolBroker(host) as broker:
        grant = reviewer_grant(broker, host, board, "r1")
        said = broker.answer({"token": grant.token, "tool": "comment", "args": {"text": "hm"}})
        decided = broker.answer(
            {"token": grant.token, "tool": "decide", "args": {"verdict": "approved"}}
        )
    assert said["ok"]["actor"] == "agent:r1"
    assert decided["ok"]["decision"]["actor"] == "agent:r1"
    [comment] = host.comments.list(board.task.id)
    assert comment.actor == "agent:r1"
    [verdict] = host.decisions.list(board.task.id, board.step("Review"))
    assert verdict.actor == "agent:r1"
    stored = events.read_all(host.store, task_id=board.task.id)
    by_type = {e.type: e.actor for e in stored}
    assert by_type["comment.added"] == "agent:r1"
    assert by_type["decision.recorded"] == "agent:r1"
    assert by_type["task.created"] == "system"
