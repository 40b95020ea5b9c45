"""The HTTP API of HTTP.md against a real `laneway serve` process on a real SQLite database:
every endpoint, the same shapes as the CLI's `--json`, the error codes and shapes, the token,
read-only, the body cap, a fuzz pass of bad bodies, and the graceful stop."""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.serve.conftest import TOKEN, OfficeBoard, Served, laneway, start_serve

pytestmark = pytest.mark.slow


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def error(response: httpx.Response, status: int, code: str | None = None) -> str:
    """An error answer: `status`, and exactly `{"error": "<one line>", "code": "<code>"}`
    (house issue item 4: a stable snake_case code beside the wording; `code` when given)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "code"}, body
    assert re.fullmatch(r"[a-z]+(_[a-z]+)*", body["code"]), body
    if code is not None:
        assert body["code"] == code, body
    assert isinstance(body["error"], str)
    assert body["error"]
    assert "\n" not in body["error"]
    assert "Traceback" not in body["error"]
    return str(body["error"])


# -- starting --------------------------------------------------------------------------------------


def test_start_line_text_and_json_and_healthz_needs_no_token(
    office: OfficeBoard, tmp_path: Path
) -> None:
    """HTTP.md Starting: one line on stdout, nothing before it; a fresh random token when none
    is given (>= 128 bits); /healthz answers without a token."""
    served = start_serve(office.db, tmp_path, token="", json_line=False)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", served.url)
        assert len(served.token) >= 22
        assert re.fullmatch(r"[A-Za-z0-9_-]+", served.token)
        with httpx.Client(base_url=served.url) as anonymous:
            assert ok(anonymous.get("/healthz")) == {"status": "ok"}
        with served.client() as client:
            info = ok(client.get("/api/info"))
        assert info["revision"]
        assert info["epoch"]
        assert info["database"].startswith("sqlite:")
        assert {"kanban", "office"} <= {p["name"] for p in info["plugins"]}
    finally:
        assert served.stop() == 0
    served = start_serve(
        office.db, tmp_path, env={"LANEWAY_TOKEN": "from-the-environment-1234"}, token=""
    )
    try:
        assert served.token == "from-the-environment-1234"
    finally:
        served.stop()


def test_token_is_never_logged(office: OfficeBoard, tmp_path: Path) -> None:
    """HTTP.md Conventions: the token never appears in logs, even at DEBUG with a bad try."""
    served = start_serve(office.db, tmp_path, global_args=("--log-json", "-v"))
    try:
        with served.client() as client:
            ok(client.get("/api/workflows"))
            missing = {"workflow": "nope", "title": "x"}
            error(client.post("/api/tasks", json=missing), 404, "not_found")
        with served.client(token=TOKEN + "x") as wrong:
            error(wrong.get("/api/workflows"), 401, "unauthorised")
    finally:
        assert served.stop() == 0
    logged = served.stderr
    assert '"path": "/api/workflows"' in logged  # requests are logged...
    assert TOKEN not in logged  # ...the token never


# -- every endpoint --------------------------------------------------------------------------------


def test_every_endpoint_answers_the_cli_shapes(served: Served, office: OfficeBoard) -> None:
    """HTTP.md Endpoints: each endpoint through a real server, answering what the matching
    `laneway --json` command prints for the same objects."""
    db = office.db
    with served.client() as c:
        # workflows
        listed = ok(c.get("/api/workflows"))
        assert listed == laneway(db, "workflow", "list")
        shown = ok(c.get(f"/api/workflows/{office.workflow_name.upper()}"))  # name, any case
        assert shown == laneway(db, "workflow", "show", office.workflow_id)
        created = ok(
            c.post("/api/workflows", json={"template": "office-default", "name": "Second"}), 201
        )
        assert created["name"] == "Second"
        assert [s["name"] for s in created["steps"]] == [s["name"] for s in shown["steps"]]
        exported = ok(c.get(f"/api/workflows/{created['id']}/export"))
        assert exported == laneway(db, "workflow", "export", created["id"])
        as_yaml = c.get(f"/api/workflows/{created['id']}/export", params={"format": "yaml"})
        assert as_yaml.status_code == 200
        assert yaml.safe_load(as_yaml.text) == exported
        exported["workflows"][0]["name"] = "Imported"
        imported = ok(c.post("/api/workflows/import", content=yaml.safe_dump(exported)), 201)
        assert [w["name"] for w in imported] == ["Imported"]
        error(c.post("/api/workflows/import", content=yaml.safe_dump(exported)), 409, "conflict")

        # tasks
        task = ok(
            c.post(
                "/api/tasks",
                json={"workflow": office.workflow_name, "title": "API task", "description": "d"},
            ),
            201,
        )
        assert task == laneway(db, "task", "show", task["id"])
        assert ok(c.get(f"/api/tasks/{task['id']}")) == task
        everything = ok(c.get("/api/tasks"))
        assert everything == laneway(db, "task", "list")
        landed = {v: k for k, v in office.steps.items()}[task["workflow_step_id"]]
        here = ok(
            c.get("/api/tasks", params={"workflow": office.workflow_name, "step": landed.lower()})
        )
        assert task["id"] in {t["id"] for t in here}
        by_id = ok(c.get("/api/tasks", params={"step": task["workflow_step_id"]}))
        assert {t["id"] for t in by_id} == {t["id"] for t in here}
        at_done = ok(c.get("/api/tasks", params={"workflow": office.workflow_name, "step": "Done"}))
        assert task["id"] not in {t["id"] for t in at_done}

        moved = ok(c.post(f"/api/tasks/{task['id']}/move", json={"step": "Review"}))
        assert moved["workflow_step_id"] == office.steps["Review"]
        assert moved == laneway(db, "task", "show", task["id"])
        entries = ok(c.get(f"/api/tasks/{task['id']}/entries"))
        assert entries == laneway(db, "entries", "list", "--task", task["id"])
        assert entries[0]["entry_path"] == "E2"
        assert entries[0]["markers"]
        assert ok(c.get("/api/entries", params={"non_terminal": "true"})) == laneway(
            db, "entries", "list", "--non-terminal"
        )
        runs = ok(c.get("/api/runs", params={"task": task["id"]}))
        assert runs == laneway(db, "runs", "list", "--task", task["id"])
        assert {r["status"] for r in runs} == {"queued"}
        assert len(runs) == 2
        assert ok(c.get("/api/runs", params={"status": "queued"})) == laneway(
            db, "runs", "list", "--status", "queued"
        )

        # decisions: both reviewers approve, the second releases the move to Approval
        first = ok(
            c.post(
                "/api/decisions",
                json={
                    "task": task["id"],
                    "step": "Review",
                    "participant": office.seats["reviewer-1"],
                    "verdict": "approved",
                    "comment": "fine",
                },
            )
        )
        assert set(first) == {"decision", "transitioned", "to_step_id", "refusals", "halted"}
        assert first["decision"]["decision"] == "approved"
        assert first["transitioned"] is False
        second = ok(
            c.post(
                "/api/decisions",
                json={
                    "task": task["id"],
                    "step": "Review",
                    "participant": office.seats["reviewer-2"],
                    "verdict": "approved",
                },
            )
        )
        assert second["transitioned"] is True
        assert second["to_step_id"] == office.steps["Approval"]
        seats = ok(c.get(f"/api/tasks/{task['id']}/decisions", params={"step": "Review"}))
        assert {s["verdict"] for s in seats["seats"]} == {"approved"}

        # sessions: an external session, a message, a turn complete
        started = laneway(db, "session", "list", "--task", task["id"])
        assert ok(c.get("/api/sessions", params={"task": task["id"]})) == started
        other = ok(
            c.post("/api/tasks", json={"workflow": office.workflow_name, "title": "Session task"}),
            201,
        )
        session = _external_session(served, db, other["id"])
        sent = ok(c.post(f"/api/sessions/{session}/send", json={"text": "hello"}))
        assert sent["state"] == "RUNNING"
        assert sent["metadata"]["messages_delivered"] == ["hello"]
        turn = ok(c.post(f"/api/tasks/{other['id']}/turn-complete", json={"session": session}))
        assert set(turn) == {
            "task",
            "transitioned",
            "from_step_id",
            "to_step_id",
            "refusals",
            "halted",
        }
        # waiting: no retry loop (a LanewayError: the base class's code)
        error(c.post(f"/api/sessions/{session}/cancel-retry"), 400, "invalid")

        # start, switch-workflow, archive, delete
        fresh = ok(
            c.post("/api/tasks", json={"workflow": office.workflow_name, "title": "Start me"}), 201
        )
        started_task = ok(c.post(f"/api/tasks/{fresh['id']}/start", json={"step": "Work"}))
        assert started_task["workflow_step_id"] == office.steps["Work"]
        assert started_task["state"] == "IN_PROGRESS"
        switched = ok(
            c.post(
                f"/api/tasks/{fresh['id']}/switch-workflow",
                json={"workflow": "Second", "step": "Backlog"},
            )
        )
        assert switched["workflow_id"] == created["id"]
        archived = ok(c.post(f"/api/tasks/{fresh['id']}/archive"))
        assert archived["archived_at"] is not None
        assert ok(c.delete(f"/api/tasks/{fresh['id']}")) == {"deleted": fresh["id"]}
        error(c.get(f"/api/tasks/{fresh['id']}"), 404)

        board = ok(c.get("/api/board", params={"workflow": office.workflow_name}))
        cards = {t["id"]: t for t in board["tasks"]}
        assert cards[task["id"]]["workflow_step_id"] == office.steps["Approval"]
        assert cards[task["id"]]["badges"]["decisions"] == {"approved": 0, "required": 1}
        page = c.get("/")
        assert page.status_code == 200
        assert "laneway" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]


def _external_session(served: Served, db: str, task_id: str) -> str:
    # No HTTP endpoint opens a session (HTTP.md has none): a CLI process does, beside serve.
    return str(laneway(db, "session", "start", task_id)["id"])


# -- errors ----------------------------------------------------------------------------------------


def test_401_without_or_with_a_wrong_token_on_every_api_route(served: Served) -> None:
    """HTTP.md Conventions: every /api route needs the bearer token; 401 says nothing else."""
    paths = ["/api/info", "/api/workflows", "/api/tasks", "/api/runs", "/api/events", "/api/nope"]
    for token in ("", "wrong-token-0123456789", TOKEN.upper(), TOKEN[:-1]):
        with served.client(token=token) as c:
            for path in paths:
                assert error(c.get(path), 401) == "unauthorized"
            assert error(c.post("/api/tasks", json={}), 401) == "unauthorized"
    with httpx.Client(base_url=served.url) as c:
        for scheme in (f"Basic {TOKEN}", TOKEN, f"bearer  {TOKEN}"):
            assert error(c.get("/api/info", headers={"Authorization": scheme}), 401)


def test_403_on_every_write_when_read_only(office: OfficeBoard, tmp_path: Path) -> None:
    """HTTP.md: --read-only refuses every write with 403 and still answers reads."""
    served = start_serve(office.db, tmp_path, "--read-only")
    try:
        with served.client() as c:
            assert ok(c.get("/api/tasks"))
            assert ok(c.get("/api/info"))["epoch"] is None  # no writer: no epoch minted
            writes = [
                ("POST", "/api/workflows", {"template": "office-default"}),
                ("POST", "/api/tasks", {"workflow": office.workflow_name, "title": "x"}),
                ("POST", f"/api/tasks/{office.task_id}/move", {"step": "Review"}),
                ("POST", f"/api/tasks/{office.task_id}/archive", None),
                ("DELETE", f"/api/tasks/{office.task_id}", None),
                ("POST", "/api/decisions", {}),
                ("POST", "/api/sessions/x/send", {"text": "hi"}),
            ]
            for method, path, body in writes:
                refused = error(c.request(method, path, json=body), 403, "read_only")
                assert refused == "this server is read-only"
        assert laneway(office.db, "task", "show", office.task_id)["archived_at"] is None
    finally:
        assert served.stop() == 0


def test_413_on_a_body_over_one_mebibyte_declared_or_streamed(served: Served) -> None:
    """HTTP.md: a body over 1 MiB is refused with 413, whether declared or chunked."""
    big = b'{"title": "' + b"x" * (1024 * 1024) + b'"}'
    with served.client() as c:
        error(
            c.post("/api/tasks", content=big, headers={"Content-Type": "application/json"}),
            413,
            "too_large",
        )

        def chunks() -> Any:
            for _ in range(40):
                yield b"y" * 32768

        error(c.post("/api/workflows/import", content=chunks()), 413, "too_large")
        # just under the cap is read and judged on its content
        error(c.post("/api/workflows/import", content=b"a: " + b"b" * 1000), 400)


def test_404_409_400_shapes(served: Served, office: OfficeBoard) -> None:
    """HTTP.md Conventions: 404 unknown task/workflow/step/route, 409 conflicts, 400 bad input
    naming the field."""
    with served.client() as c:
        assert "no task" in error(c.get("/api/tasks/nope"), 404, "not_found")
        assert "no workflow" in error(c.get("/api/workflows/nope"), 404)
        error(c.post(f"/api/tasks/{office.task_id}/move", json={"step": "Nowhere"}), 404)
        error(c.post("/api/tasks/nope/move", json={"step": "Review"}), 404)
        error(c.get("/api/nothing/here"), 404, "not_found")
        error(c.post("/api/sessions/nope/send", json={"text": "hi"}), 404)
        error(c.post("/api/workflows", json={"template": "no-such-template"}), 404)
        ok(c.post("/api/workflows", json={"template": "office-default", "name": "Taken"}), 201)
        assert "already exists" in error(
            c.post("/api/workflows", json={"template": "office-default", "name": "taken"}), 409
        )
        no_step = c.post(f"/api/tasks/{office.task_id}/move", json={})
        assert "'step'" in error(no_step, 400, "bad_request")
        assert "'step'" in error(c.post(f"/api/tasks/{office.task_id}/move", json={"step": 3}), 400)
        assert "'title'" in error(
            c.post("/api/tasks", json={"workflow": office.workflow_name}), 400
        )
        assert "verdict" in error(
            c.post(
                "/api/decisions",
                json={
                    "task": office.task_id,
                    "step": "Review",
                    "participant": office.seats["reviewer-1"],
                    "verdict": "maybe",
                },
            ),
            400,
        )
        assert "JSON" in error(c.post("/api/tasks", content=b"{nope"), 400, "bad_request")
        error(c.get("/api/entries", params={"non_terminal": "perhaps"}), 400)
        error(c.get("/api/sessions"), 400)
        error(c.get("/api/events", headers={"Last-Event-ID": "abc"}), 400)
        error(c.get("/api/events", params={"task": "nope"}), 404, "not_found")
        error(c.put("/api/tasks"), 405, "method_not_allowed")


def _fuzz_values() -> list[Any]:
    return [
        None,
        True,
        False,
        0,
        -1,
        2**70,
        1.5,
        float("1e308"),
        "",
        " ",
        "\x00",
        "é" * 300,
        "x" * 5000,
        [],
        [1, "a"],
        {},
        {"nested": {"deep": [None]}},
    ]


def test_fuzz_malformed_json_and_wrong_types_never_answer_500(
    served: Served, office: OfficeBoard
) -> None:
    """HTTP.md Conventions: nothing a client sends gives a traceback or a 500."""
    t = office.task_id
    endpoints: dict[str, list[str]] = {
        "/api/workflows": ["template", "name"],
        "/api/tasks": ["workflow", "title", "description", "step", "project"],
        f"/api/tasks/{t}/move": ["step"],
        f"/api/tasks/{t}/start": ["step"],
        f"/api/tasks/{t}/switch-workflow": ["workflow", "step"],
        f"/api/tasks/{t}/turn-complete": ["session"],
        "/api/decisions": ["task", "step", "participant", "verdict", "comment"],
        "/api/sessions/nope/send": ["text"],
    }
    raw_bodies = [
        b"",
        b"{",
        b"}",
        b"[",
        b"null",
        b"42",
        b'"text"',
        b"[]",
        b'{"a":',
        b"\xff\xfe\x00",
        b'{"step": "Review"' + b"]" * 3,
        b"{" * 2000 + b"}" * 2000,
        b'{"\\ud800": 1}',
        '{"title": "\u0000"}'.encode(),
    ]
    seen: dict[int, int] = {}
    with served.client() as c:
        for path, fields in endpoints.items():
            for raw in raw_bodies:
                response = c.post(path, content=raw, headers={"Content-Type": "application/json"})
                seen[response.status_code] = seen.get(response.status_code, 0) + 1
                _not_a_crash(response, path, raw)
            for field in fields:
                for value in _fuzz_values():
                    body = {f: "Review" for f in fields} | {field: value}
                    response = c.post(path, json=body)
                    seen[response.status_code] = seen.get(response.status_code, 0) + 1
                    _not_a_crash(response, path, body)
        for path in ("/api/tasks", "/api/runs", "/api/entries", "/api/sessions", "/api/board"):
            for value in ("", "\x00", "%", "x" * 3000, "'; DROP TABLE tasks; --"):
                response = c.get(
                    path,
                    params={
                        "workflow": value,
                        "task": value,
                        "step": value,
                        "status": value,
                        "non_terminal": value,
                    },
                )
                _not_a_crash(response, path, value)
        ok(c.get("/api/tasks"))  # still standing, data intact
    assert 500 not in seen
    assert 400 in seen


def _not_a_crash(response: httpx.Response, path: str, sent: Any) -> None:
    assert response.status_code < 500, (path, sent, response.text)
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error", "code"}, (path, sent, body)
        assert "Traceback" not in body["error"], (path, sent, body)


# -- stopping --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_stop_within_ten_seconds_exit_zero(
    office: OfficeBoard, tmp_path: Path, sig: signal.Signals
) -> None:
    """HTTP.md Starting: on SIGINT/SIGTERM it stops accepting, finishes requests in flight
    (at most 10 s) and exits 0, with event streams open."""
    served = start_serve(office.db, tmp_path)
    stream = httpx.Client(
        base_url=served.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    ended = threading.Event()

    def listen() -> None:
        try:
            with stream.stream("GET", "/api/events") as response:
                for _line in response.iter_lines():
                    pass
        except httpx.HTTPError:
            pass
        ended.set()

    threading.Thread(target=listen, daemon=True).start()
    with served.client() as c:
        ok(c.post(f"/api/tasks/{office.task_id}/move", json={"step": "Review"}))
    time.sleep(0.3)
    started = time.monotonic()
    code = served.stop(sig, timeout=60)
    took = time.monotonic() - started
    assert code == 0, served.stderr
    # the open event stream would hold it for ever; its limit is 10 s (not timed to the
    # second here: a loaded machine misses such a bound, issue 38 item 20)
    assert took < 30
    assert ended.wait(5), "the event stream was not ended by the stop"
    assert "Traceback" not in served.stderr
    with pytest.raises(httpx.ConnectError), httpx.Client(base_url=served.url) as after:
        after.get("/healthz")


def test_cors_is_off_unless_an_origin_is_allowed(
    served: Served, office: OfficeBoard, tmp_path: Path
) -> None:
    """Issue 13 Security: CORS off unless configured (`--allow-origin`)."""
    origin = {"Origin": "http://elsewhere.test"}
    with served.client() as c:
        answer = c.get("/api/tasks", headers=origin)
        assert answer.status_code == 200
        assert "access-control-allow-origin" not in answer.headers
    allowed = start_serve(office.db, tmp_path, "--allow-origin", "http://elsewhere.test")
    try:
        with allowed.client() as c:
            preflight = c.options(
                "/api/tasks",
                headers={
                    **origin,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization,content-type",
                },
            )
            assert preflight.status_code == 200
            assert preflight.headers["access-control-allow-origin"] == "http://elsewhere.test"
            answer = c.get("/api/tasks", headers=origin)
            assert answer.headers["access-control-allow-origin"] == "http://elsewhere.test"
            other = c.get("/api/tasks", headers={"Origin": "http://evil.test"})
            assert "access-control-allow-origin" not in other.headers
    finally:
        assert allowed.stop() == 0
