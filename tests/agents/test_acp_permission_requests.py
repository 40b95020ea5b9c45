"""Permission requests a person answers (issue 22 item 2), through real `laneway worker`
processes and the fake ACP agent, on both databases.

Contract rows: AGENTS.md "Profiles" (`--permissions ask` puts a permission request on the
board and the turn waits for a person; `allow`/`deny`/`--auto-allow` answer without one),
CLI.md `permission list [--task T] [--state S]` / `permission allow ID [--always]` /
`permission deny ID` (the *permission* shape), HTTP.md `GET /api/permissions?task=&state=`,
`POST /api/permissions/{p}` and the `permission.requested`/`permission.resolved` events, and
issue 22's tests: a round trip answered by a separate CLI process and by the HTTP API, deny,
auto-allow, a worker killed while a request is pending (the request ends `cancelled`, the run
is re-queued, nothing hangs); on_approval_resolved fires once (`permission:<id>`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.store import tables as t
from tests.agents.conftest import laneway, laneway_script, run_rows, script_env
from tests.agents.test_acp_worker import Board, messages, workflow_yaml
from tests.conftest import eventually, open_host, wait_for_dead_processes

pytestmark = pytest.mark.slow

PERMISSION_KEYS = {
    "id",
    "task_id",
    "session_id",
    "run_id",
    "tool_call",
    "options",
    "state",
    "option_id",
    "decided_by",
    "created_at",
    "decided_at",
    "actor",  # who answered it (issue 44)
}
ASK = {"permission": {"kind": "edit", "title": "Edit a.py"}}
"""The fake agent asks before editing; its options are yes (allow_once), always
(allow_always) and no (reject_once), and it says `permission: OPTION-ID|cancelled`."""


def approval_yaml() -> str:
    """The worker board of test_acp_worker, whose Work step answers on_approval_resolved by
    recording workflow data on the session (visible, and harmless to the running turn)."""
    text = workflow_yaml([])
    marker = '      on_turn_complete: [{"type": "move_to_next"}]\n'
    head, tail = text.split(marker, 1)
    resolved = (
        '      on_approval_resolved: [{"type": "set_workflow_data", '
        '"config": {"key": "approval", "value": "resolved"}}]\n'
    )
    return head + marker + resolved + tail


def cli(board: Board, *args: str) -> subprocess.CompletedProcess[str]:
    """A separate `laneway --json ...` process on the board's database."""
    return laneway("--db", board.url, "--json", *args, cwd=board.tmp_path)


def cli_json(board: Board, *args: str) -> Any:
    done = cli(board, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def start_worker(board: Board, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [laneway_script(), "--db", board.url, "worker", "--once"],
        cwd=board.tmp_path,
        env=script_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(what: str, found: Callable[[], Any], timeout: float = 60.0) -> Any:
    return eventually(found, timeout=timeout, what=what, every=0.2)


def pending(board: Board) -> list[dict[str, Any]]:
    return list(cli_json(board, "permission", "list", "--state", "pending"))


def finish(worker: subprocess.Popen[str], timeout: float = 90.0) -> str:
    try:
        _out, err = worker.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise AssertionError("the worker hung") from None
    assert worker.returncode == 0, err
    return err


def board_events(url: str, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    with open_host(url, read_only=True) as host, host.store.read() as conn:
        found = conn.execute(
            sa.select(t.board_events.c.type, t.board_events.c.data)
            .where(t.board_events.c.type.like(f"{prefix}%"))
            .order_by(t.board_events.c.id)
        ).all()
    return [(kind, json.loads(data)) for kind, data in found]


def applied(url: str, operation_id: str) -> list[str]:
    ops = t.applied_operations
    with open_host(url, read_only=True) as host, host.store.read() as conn:
        return list(
            conn.execute(sa.select(ops.c.state).where(ops.c.operation_id == operation_id))
            .scalars()
            .all()
        )


def test_ask_waits_for_a_person_and_a_separate_permission_allow_process_answers(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md `--permissions ask`; CLI.md `permission list` / `permission allow ID` (by
    a unique suffix) and the permission shape; HTTP.md's permission events; a second answer
    is refused in one line; on_approval_resolved fires once with operation id
    `permission:<id>`."""
    board = Board(db_url, tmp_path, {"turns": [[ASK], []]}, yaml=approval_yaml())
    worker = start_worker(board)
    try:
        (asked,) = wait_for("a pending request", lambda: pending(board))
        assert set(asked) == PERMISSION_KEYS
        assert asked["state"] == "pending"
        assert asked["task_id"] == board.task_id
        assert asked["tool_call"]["title"] == "Edit a.py"
        assert asked["tool_call"]["kind"] == "edit"
        assert [(o["option_id"], o["kind"]) for o in asked["options"]] == [
            ("yes", "allow_once"),
            ("always", "allow_always"),
            ("no", "reject_once"),
        ]
        assert (asked["option_id"], asked["decided_by"], asked["decided_at"]) == (None,) * 3
        (run,) = run_rows(db_url)
        assert (asked["run_id"], run["status"]) == (run["id"], "claimed")
        assert cli_json(board, "permission", "list", "--task", board.task_id) == [asked]
        time.sleep(1.0)  # the turn really waits: nothing answered it meanwhile
        assert worker.poll() is None
        assert pending(board) == [asked]

        allowed = cli_json(board, "permission", "allow", asked["id"][-8:])
        assert (allowed["id"], allowed["state"], allowed["option_id"]) == (
            asked["id"],
            "allowed",
            "yes",
        )
        assert allowed["decided_by"] == "user"
        assert allowed["decided_at"]
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    step, session, items = board.read()
    assert "permission: yes" in messages(items)  # the agent got the option chosen
    (item,) = [i for i in items if i["kind"] == "permission"]
    assert (item["data"]["option_id"], item["data"]["decided_by"]) == ("yes", "person")
    assert step == "Done"
    assert run_rows(db_url)[0]["status"] == "finished"

    again = cli(board, "permission", "deny", asked["id"])
    assert again.returncode == 1
    (line,) = again.stderr.splitlines()
    assert json.loads(line) == {
        "error": f"permission {asked['id']} is already allowed by user; it cannot be answered",
        "code": "conflict",
    }
    assert cli_json(board, "permission", "list") == [allowed]

    said = {"permission_id": asked["id"], "run_id": run["id"]}
    assert board_events(db_url, "permission.") == [
        ("permission.requested", {**said, "state": "pending"}),
        ("permission.resolved", {**said, "state": "allowed"}),
    ]
    assert applied(db_url, f"permission:{asked['id']}") == ["applied"]
    assert session.metadata["workflow_data"] == {"approval": "resolved"}
    with open_host(db_url) as host:  # a second delivery of the trigger evaluates nothing
        assert host.permissions.fire(host.permissions.get(asked["id"])).idempotent


@pytest.mark.one_database
def test_permission_deny_answers_with_the_reject_option(db_url: str, tmp_path: Path) -> None:
    """CLI.md `permission deny ID`: the request's first reject option goes to the agent."""
    board = Board(db_url, tmp_path, {"turns": [[ASK], []]})
    worker = start_worker(board)
    try:
        (asked,) = wait_for("a pending request", lambda: pending(board))
        denied = cli_json(board, "permission", "deny", asked["id"])
        assert (denied["state"], denied["option_id"]) == ("denied", "no")
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    _step, _session, items = board.read()
    assert "permission: no" in messages(items)
    assert cli_json(board, "permission", "list", "--state", "denied") == [denied]


@pytest.mark.one_database
def test_allow_always_picks_the_allow_always_option(db_url: str, tmp_path: Path) -> None:
    """CLI.md `permission allow ID --always`."""
    board = Board(db_url, tmp_path, {"turns": [[ASK], []]})
    worker = start_worker(board)
    try:
        (asked,) = wait_for("a pending request", lambda: pending(board))
        chosen = cli_json(board, "permission", "allow", asked["id"], "--always")
        assert (chosen["state"], chosen["option_id"]) == ("allowed", "always")
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert "permission: always" in messages(board.read()[2])


@pytest.mark.one_database
@pytest.mark.parametrize(
    "profile",
    [{"permissions": "deny"}, {"permissions": "allow"}, {"auto_allow": ["edit"]}],
    ids=["deny", "allow", "auto-allow"],
)
def test_policies_answer_without_a_person_and_put_nothing_on_the_board(
    db_url: str, tmp_path: Path, profile: dict[str, Any]
) -> None:
    """AGENTS.md: `--permissions deny|allow` and `--auto-allow` kinds never ask: no request
    row, no permission event, the turn goes on."""
    board = Board(db_url, tmp_path, {"turns": [[ASK], []]}, **profile)
    board.work()
    step, _session, items = board.read()
    expected = "no" if profile.get("permissions") == "deny" else "yes"
    assert f"permission: {expected}" in messages(items)
    assert step == "Done"
    assert cli_json(board, "permission", "list") == []
    assert board_events(db_url, "permission.") == []


@pytest.mark.one_database
def test_waiting_for_a_person_is_not_the_agents_silence(db_url: str, tmp_path: Path) -> None:
    """AGENTS.md `--idle-timeout`: nothing heard from the agent for that long ends the turn,
    but a turn waiting on a person's answer is not silent: answered after 3 idle timeouts,
    the turn still finishes."""
    board = Board(db_url, tmp_path, {"turns": [[ASK], []]}, idle_timeout=1.0)
    worker = start_worker(board)
    try:
        (asked,) = wait_for("a pending request", lambda: pending(board))
        time.sleep(3.0)
        assert worker.poll() is None
        cli_json(board, "permission", "allow", asked["id"])
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    step, _session, items = board.read()
    assert "permission: yes" in messages(items)
    assert step == "Done"


@pytest.mark.one_database
def test_a_turn_that_times_out_while_waiting_cancels_its_request(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md `--turn-timeout` counts the wait: the turn ends `turn timed out after N s`
    (a terminal failure), the agent is answered `cancelled`, and the request ends `cancelled`
    (a person's later answer is refused)."""
    board = Board(db_url, tmp_path, {"turns": [[ASK], []]}, turn_timeout=2.0)
    board.work()
    step, _session, items = board.read()
    assert step == "Trouble"  # on_agent_error
    (run,) = run_rows(db_url)
    assert run["status"] == "failed"
    assert "turn timed out after 2 s" in (run["error_message"] or "")
    (asked,) = cli_json(board, "permission", "list")
    assert asked["state"] == "cancelled"
    assert asked["decided_by"] in ("turn_ended", "run_ended")
    (item,) = [i for i in items if i["kind"] == "permission"]
    assert item["data"]["option_id"] is None
    refused = cli(board, "permission", "allow", asked["id"])
    assert refused.returncode == 1
    assert "is already cancelled" in refused.stderr


def test_worker_killed_while_a_request_is_pending(db_url: str, tmp_path: Path) -> None:
    """Issue 22 tests: kill -9 of the worker while its turn waits for a person: the dead
    worker's run is re-queued and its request ends `cancelled` in that same step (`laneway
    recover`, as any worker's next look); the next worker runs the turn again (the agent
    asks again, and is answered), and nothing hangs."""
    board = Board(db_url, tmp_path, {"turns": [[ASK], []]})
    worker = start_worker(board)
    try:
        (first,) = wait_for("a pending request", lambda: pending(board))
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert [r["status"] for r in run_rows(db_url)] == ["claimed"]
    assert pending(board) == [first]  # no one is left to withdraw it but the next look
    wait_for_dead_processes(db_url)
    recovered = laneway("--db", db_url, "recover", cwd=tmp_path)
    assert recovered.returncode == 0, recovered.stderr
    (run,) = run_rows(db_url)
    assert run["status"] == "queued"
    (gone,) = cli_json(board, "permission", "list")
    assert (gone["id"], gone["state"], gone["decided_by"]) == (
        first["id"],
        "cancelled",
        "worker_died",
    )
    said = {"permission_id": first["id"], "run_id": run["id"], "state": "cancelled"}
    assert ("permission.resolved", said) in board_events(db_url, "permission.")

    worker = start_worker(board)
    try:
        (second,) = wait_for("the re-run's request", lambda: pending(board))
        assert second["id"] != first["id"]
        assert second["run_id"] == run["id"]
        cli_json(board, "permission", "allow", second["id"])
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    rerun = run_rows(db_url)[0]  # the task's next step queued one more behind it
    assert (rerun["id"], rerun["status"], rerun["attempts"]) == (run["id"], "finished", 2)
    assert applied(db_url, f"permission:{first['id']}") == []  # a cancel is no one's answer
    assert [p["state"] for p in cli_json(board, "permission", "list")] == [
        "cancelled",
        "allowed",
    ]


def test_the_http_api_lists_and_answers_a_request_and_streams_its_events(
    db_url: str, tmp_path: Path
) -> None:
    """HTTP.md `GET /api/permissions?task=T&state=S` ([permission], as `permission list`),
    `POST /api/permissions/{p}` with `{"outcome": "allow"|"deny", "always"?}` (permission),
    and the `permission.requested` / `permission.resolved` events (`permission_id`, `run_id`,
    `state`) on `/api/events?task=T`; a second answer is a 409 `conflict`, a bad outcome a
    400 naming the field. The waiting worker is another process; its turn goes on."""
    from tests.serve.conftest import EventReader, start_serve
    from tests.serve.test_serve_api import error, ok

    board = Board(db_url, tmp_path, {"turns": [[ASK], []]})
    served = start_serve(db_url, tmp_path)
    reader = EventReader(served, task=board.task_id)
    worker = start_worker(board)
    try:
        with served.client() as c:
            asked = reader.wait_for(
                lambda evs: [e for e in evs if e.type == "permission.requested"], timeout=60
            )
            (requested,) = [e.data for e in asked if e.type == "permission.requested"]
            query = {"task": board.task_id, "state": "pending"}
            (listed,) = ok(c.get("/api/permissions", params=query))
            assert set(listed) == PERMISSION_KEYS
            assert listed == cli_json(board, "permission", "list", "--state", "pending")[0]
            assert (requested["permission_id"], requested["run_id"], requested["state"]) == (
                listed["id"],
                listed["run_id"],
                "pending",
            )
            assert ok(c.get("/api/permissions", params={"state": "allowed"})) == []
            assert "state" in error(c.get("/api/permissions", params={"state": "maybe"}), 400)
            path = f"/api/permissions/{listed['id'][-8:]}"
            assert "outcome" in error(c.post(path, json={"outcome": "perhaps"}), 400)
            assert "always" in error(c.post(path, json={"outcome": "allow", "always": 1}), 400)
            error(c.post("/api/permissions/nosuchrequest", json={"outcome": "allow"}), 404)
            answered = ok(c.post(path, json={"outcome": "allow"}))
            assert (answered["state"], answered["option_id"], answered["decided_by"]) == (
                "allowed",
                "yes",
                "user",
            )
            assert "already allowed" in error(
                c.post(path, json={"outcome": "deny"}), 409, "conflict"
            )
            done = reader.wait_for(
                lambda evs: [e for e in evs if e.type == "permission.resolved"], timeout=30
            )
            (resolved,) = [e.data for e in done if e.type == "permission.resolved"]
            assert (resolved["permission_id"], resolved["state"]) == (listed["id"], "allowed")
        finish(worker)
    finally:
        reader.close()
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        served.stop(signal.SIGKILL)
    _step, _session, items = board.read()
    assert "permission: yes" in messages(items)
