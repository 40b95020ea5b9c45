"""Issue 44 item 2: roles at the HTTP boundary, on both databases (the app in-process).

The table in `core.serve.roles` names every API route the app serves; each role is tried on
every route: a role the route allows gets past the guard (a 2xx or the domain's own error for
a task or run that does not exist, never 401 nor a role's 403), a role below it gets a JSON 403
naming the role it needs."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from core.serve import roles
from core.serve.app import build_app
from core.services import users
from tests.cli.conftest import Laneway
from tests.conftest import open_host
from tests.test_contract_docs import HTTP_NOT_YET

ADMIN = "admin-token-0123456789"


def _api_routes(app: Any) -> list[tuple[str, str]]:
    return sorted(
        (method, r.path)
        for r in app.routes
        if isinstance(r, Route) and r.path.startswith("/api")
        for method in (r.methods or ())
        if method != "HEAD"
    )


def test_issue_44_item_2_every_route_has_a_rule(sqlite_url: str) -> None:
    """A route added without a rule fails here (it would need `admin`, closed by default)."""
    Laneway(sqlite_url).json("init")
    with open_host(sqlite_url) as host:
        served = _api_routes(build_app(host, token=ADMIN))
    missing = [r for r in served if r not in roles.RULES]
    assert not missing, f"routes without a role in core/serve/roles.py RULES: {missing}"
    # a contract route another change builds may have its rule first (HTTP_NOT_YET)
    stale = sorted(set(roles.RULES) - set(served) - HTTP_NOT_YET)
    assert not stale, f"RULES names routes the app does not serve: {stale}"


def _path(template: str) -> str:
    # a task, run, session... that does not exist: the domain answers 404 (or 400), no change
    for name in ("t", "w", "r", "s", "p", "h", "q", "id"):
        template = template.replace("{" + name + "}", "nope-44")
    assert "{" not in template, template
    return template


@pytest.mark.parametrize("role", users.ROLES)
def test_issue_44_item_2_each_role_against_every_endpoint(db_url: str, role: str) -> None:
    lw = Laneway(db_url)
    lw.json("init")
    token = lw.json("user", "add", f"{role}-person", "--role", role)["token"]
    with open_host(db_url) as host:
        app = build_app(host, token=ADMIN)
        with TestClient(app) as c:
            c.headers["Authorization"] = f"Bearer {token}"
            for method, template in _api_routes(app):
                if template == "/api/events":
                    continue  # a stream: checked below without reading it to its end
                needed = roles.RULES[(method, template)]
                answer = c.request(method, _path(template), json={})
                where = f"{role} {method} {template}: {answer.status_code} {answer.text[:200]}"
                assert answer.headers["content-type"].startswith("application/json"), where
                body = answer.json()
                if roles.allows(role, needed):
                    assert answer.status_code not in (401, 403), where
                else:
                    assert answer.status_code == 403, where
                    assert body["code"] == "forbidden", where
                    assert body["role"] == needed, where
                    assert f"needs the {needed} role" in body["error"], where
            # every role reads the stream (HTTP.md: a viewer may read the stream)
            with c.stream("GET", "/api/events") as stream:
                assert stream.status_code == 200


def test_issue_44_item_2_unknown_and_missing_tokens_are_401_on_every_endpoint(
    sqlite_url: str,
) -> None:
    Laneway(sqlite_url).json("init")
    with open_host(sqlite_url) as host:
        app = build_app(host, token=ADMIN)
        with TestClient(app) as c:
            for method, template in _api_routes(app):
                for headers in ({}, {"Authorization": "Bearer unknown-token-44"}):
                    answer = c.request(method, _path(template), json={}, headers=headers)
                    assert answer.status_code == 401, (method, template, answer.text)
                    assert answer.json()["code"] == "unauthorised"


def test_issue_44_item_5_a_trusted_proxys_user_header_names_the_person(sqlite_url: str) -> None:
    """`serve --user-header H`: a request carrying H is the user it names, with that user's
    role; a name the board does not know is a 401; without the option the header is ignored."""
    lw = Laneway(sqlite_url)
    lw.json("init")
    lw.json("user", "add", "vera", "--role", "viewer")
    with open_host(sqlite_url) as host:
        proxied = build_app(host, token=ADMIN, user_header="X-Forwarded-User")
        with TestClient(proxied) as c:
            me = c.get("/api/me", headers={"X-Forwarded-User": "vera"})
            assert me.json() == {"name": "vera", "role": "viewer", "actor": "user:vera"}
            refused = c.post("/api/tasks", json={}, headers={"X-Forwarded-User": "vera"})
            assert (refused.status_code, refused.json()["role"]) == (403, "operator")
            assert c.get("/api/me", headers={"X-Forwarded-User": "mallory"}).status_code == 401
        with TestClient(build_app(host, token=ADMIN)) as c:
            assert c.get("/api/me", headers={"X-Forwarded-User": "vera"}).status_code == 401


@pytest.mark.one_database
def test_issue_44_a_hooks_url_is_read_whole_by_an_admin_only(sqlite_url: str) -> None:
    """ "Secrets stay put": a webhook's URL may be its credential (Slack's and Discord's paths
    are), so `GET /api/hooks` shows a viewer or an operator only where it sends; an admin,
    who adds and removes hooks, reads it whole. The list's shape is the same for every role."""
    lw = Laneway(sqlite_url)
    lw.json("init")
    secret_url = "https://hooks.example.com:8443/services/T000/B000/XXXXsecretXXXX?key=abc"
    lw.json("hook", "add", secret_url)
    lw.json("hook", "add", "http://[::1]:9/notify")
    tokens = {r: lw.json("user", "add", f"{r}-person", "--role", r)["token"] for r in users.ROLES}
    with open_host(sqlite_url) as host, TestClient(build_app(host, token=ADMIN)) as c:
        for role, token in tokens.items():
            seen = c.get("/api/hooks", headers={"Authorization": f"Bearer {token}"}).json()
            urls = [h["url"] for h in seen]
            assert {tuple(sorted(h)) for h in seen} == {("created_at", "events", "id", "url")}
            if role == roles.ADMIN:
                assert urls == [secret_url, "http://[::1]:9/notify"], role
            else:
                assert urls == ["https://hooks.example.com:8443/***", "http://[::1]:9/***"], role
                assert not any("secret" in u or "key=" in u for u in urls), role
        whole = c.get("/api/hooks", headers={"Authorization": f"Bearer {ADMIN}"}).json()
        assert whole[0]["url"] == secret_url
