"""Issue 44 item 5: a person's token is refused at once by every `serve` of a board. Two
`laneway serve` processes on one database (both databases); `laneway user token` (a new
token) and `laneway user remove`, each a separate process, take the old token away from both
on the very next request: no cache to wait out."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.serve.conftest import laneway, start_serve


def _me(url: str, token: str) -> httpx.Response:
    return httpx.get(f"{url}/api/me", headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_issue_44_item_5_a_removed_users_token_is_refused_at_once_by_two_serves(
    db_url: str, tmp_path: Path
) -> None:
    laneway(db_url, "init")
    first = laneway(db_url, "user", "add", "alice", "--role", "operator")["token"]
    serves = [start_serve(db_url, tmp_path), start_serve(db_url, tmp_path)]
    try:
        for s in serves:
            assert _me(s.url, first).json()["name"] == "alice"
        second = laneway(db_url, "user", "token", "alice")["token"]
        for s in serves:
            refused = _me(s.url, first)
            assert refused.status_code == 401, refused.text
            assert refused.json()["code"] == "unauthorised"
            assert _me(s.url, second).json() == {
                "name": "alice",
                "role": "operator",
                "actor": "user:alice",
            }
        laneway(db_url, "user", "remove", "alice")
        for s in serves:
            refused = _me(s.url, second)
            assert refused.status_code == 401, refused.text
            # the admin token of each serve still works
            assert _me(s.url, s.token).json()["role"] == "admin"
    finally:
        for s in serves:
            s.stop()
    for s in serves:
        assert first not in s.stderr
        assert second not in s.stderr
