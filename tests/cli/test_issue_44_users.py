"""Issue 44 item 1: people of the board (`laneway user ...`), their tokens stored only as a
hash and looked up on every request, on both databases; bad input is one line (CLI) or a
JSON 4xx (HTTP)."""

from __future__ import annotations

import hashlib
from typing import Any

import sqlalchemy as sa
from starlette.testclient import TestClient

from core.serve.app import build_app
from core.store import tables as t
from tests.cli.conftest import Laneway
from tests.conftest import open_host

ADMIN = "admin-token-0123456789"


def _json_error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert isinstance(body["error"], str)
    assert "\n" not in body["error"]
    return body


def test_issue_44_item_1_add_list_set_token_remove(laneway: Laneway) -> None:
    made = laneway.json("user", "add", "alice", "--role", "viewer")
    assert set(made) == {"name", "role", "token"}
    assert (made["name"], made["role"]) == ("alice", "viewer")
    token = made["token"]
    assert len(token) >= 43
    listed = laneway.json("user", "list")
    assert [set(u) for u in listed] == [{"name", "role", "created_at"}]
    assert token not in str(listed)
    with open_host(laneway.url) as host, host.store.read() as conn:
        [row] = conn.execute(sa.select(t.users)).mappings().all()
    # stored only as a hash: no column holds the token itself
    assert row["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in [str(v) for v in row.values()]

    assert laneway.json("user", "set", "alice", "--role", "operator")["role"] == "operator"
    renewed = laneway.json("user", "token", "alice")
    assert set(renewed) == {"name", "token"}
    assert renewed["token"] != token
    assert laneway.json("user", "remove", "alice") == {"removed": "alice"}
    assert laneway.json("user", "list") == []


def test_issue_44_item_1_bad_input_is_one_line(laneway: Laneway) -> None:
    laneway.json("user", "add", "bob", "--role", "admin")
    assert "role 'root'" in laneway.fails("user", "add", "carol", "--role", "root")
    assert "already exists" in laneway.fails("user", "add", "bob", "--role", "viewer")
    assert "role 'boss'" in laneway.fails("user", "set", "bob", "--role", "boss")
    assert "user name" in laneway.fails("user", "add", "a b", "--role", "viewer")
    assert "user name" in laneway.fails("user", "add", "x" * 10_000, "--role", "viewer")
    assert "user name" in laneway.fails("user", "add", "nul\x00", "--role", "viewer")
    assert "reserved" in laneway.fails("user", "add", "admin", "--role", "viewer")
    assert "no user 'zed'" in laneway.fails("user", "remove", "zed")
    assert "no user 'zed'" in laneway.fails("user", "token", "zed")
    assert "no user 'zed'" in laneway.fails("user", "set", "zed", "--role", "viewer")
    failed = laneway.run("--json", "user", "add", "bob", "--role", "viewer")
    assert failed.exit_code == 1
    assert "already exists" in failed.stderr
    assert failed.stderr.startswith("{")


def test_issue_44_item_1_tokens_over_http_stop_at_once(laneway: Laneway) -> None:
    alice = laneway.json("user", "add", "alice", "--role", "viewer")["token"]
    with open_host(laneway.url) as host, TestClient(build_app(host, token=ADMIN)) as c:

        def me(token: str) -> Any:
            return c.get("/api/me", headers={"Authorization": f"Bearer {token}"})

        assert me(ADMIN).json() == {"name": "admin", "role": "admin", "actor": "user:admin"}
        assert me(alice).json() == {"name": "alice", "role": "viewer", "actor": "user:alice"}
        laneway.json("user", "set", "alice", "--role", "operator")
        assert me(alice).json()["role"] == "operator"
        renewed = laneway.json("user", "token", "alice")["token"]
        assert _json_error(me(alice), 401)["code"] == "unauthorised"
        assert me(renewed).json()["name"] == "alice"
        laneway.json("user", "remove", "alice")
        _json_error(me(renewed), 401)
        _json_error(me("not-a-token-of-anyone"), 401)
        assert "512" in _json_error(me("x" * 10_240), 400)["error"]
        _json_error(c.get("/api/me"), 401)
        # a NUL or another control character in the token: refused before any lookup
        raw = c.get("/api/me", headers=[(b"authorization", b"Bearer abc\x00def")])
        assert "printable" in _json_error(raw, 400)["error"]
