"""Issue 44 (people at the HTTP boundary), two holes closed, the app in-process.

Cross-site writes: a write (any method but GET, HEAD, OPTIONS) another site's page made is a
403 before anything else runs, as Go 1.25's `http.CrossOriginProtection` decides it: the
browser's `Sec-Fetch-Site` must say `same-origin` or `none`; without it an `Origin` must be
this server (`Host` or `X-Forwarded-Host`); a request with neither is no browser's and passes.
Behind a signing-in proxy (`--user-header`) the proxy's cookie rides any page's text/plain
form POST, which is what made this matter.

Spoofable names: a person's comment and permission answer are written in the person's own
name (`user:<name>`); a body naming anyone else is a 400; the admin token still writes for
whomever its scripts name."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from core.serve.app import build_app
from tests.agents.conftest import session_with_run
from tests.cli.conftest import Laneway
from tests.conftest import open_host

ADMIN = "admin-token-0123456789"
EVIL = "https://evil.example"
STOLEN = {"url": f"{EVIL}/collect"}
OPTIONS = [{"option_id": "yes", "name": "Allow", "kind": "allow_once"}]


@pytest.fixture
def client(sqlite_url: str) -> Iterator[TestClient]:
    """The board's app with its admin token (TestClient's Host is `testserver`)."""
    Laneway(sqlite_url).json("init")
    with open_host(sqlite_url) as host, TestClient(build_app(host, token=ADMIN)) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN}"
        yield c


def _hook(c: TestClient, headers: Mapping[str, str], **extra: Any) -> Any:
    return c.post("/api/hooks", json=STOLEN, headers=dict(headers), **extra)


def _refused(answer: Any, seen: str) -> None:
    assert answer.status_code == 403, answer.text
    body = answer.json()
    assert body["code"] == "forbidden", body
    assert "cross-site request may not change the board" in body["error"], body
    assert seen in body["error"], body


# -- cross-site writes ---------------------------------------------------------------------------


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_issue_44_cross_site_a_write_another_site_made_is_refused_and_stores_nothing(
    client: TestClient, site: str
) -> None:
    _refused(_hook(client, {"Sec-Fetch-Site": site, "Origin": EVIL}), f"Sec-Fetch-Site: {site}")
    # whatever the Origin says: the browser's own word on the site wins
    same_host = {"Sec-Fetch-Site": site, "Origin": "http://testserver"}
    _refused(_hook(client, same_host), f"Sec-Fetch-Site: {site}")
    _refused(client.delete("/api/hooks/nope", headers={"Sec-Fetch-Site": site}), site)
    assert client.get("/api/hooks").json() == []


@pytest.mark.parametrize("site", ["same-origin", "none"])
def test_issue_44_cross_site_a_same_origin_write_passes(client: TestClient, site: str) -> None:
    made = _hook(client, {"Sec-Fetch-Site": site, "Origin": "http://testserver"})
    assert made.status_code == 201, made.text
    assert [h["url"] for h in client.get("/api/hooks").json()] == [STOLEN["url"]]


def test_issue_44_cross_site_an_old_browsers_origin_must_be_this_server(
    client: TestClient,
) -> None:
    """No Sec-Fetch-Site (a browser too old to send it): the Origin decides."""
    _refused(_hook(client, {"Origin": EVIL}), f"Origin: {EVIL}, Host: testserver")
    _refused(_hook(client, {"Origin": "null"}), "Origin: null")
    _refused(_hook(client, {"Origin": "http://testserver.evil.example"}), "Origin:")
    assert client.get("/api/hooks").json() == []
    assert _hook(client, {"Origin": "http://testserver"}).status_code == 201
    assert _hook(client, {"Origin": "http://TestServer"}).status_code == 201
    # behind a proxy that rewrote Host, the host the browser asked for
    proxied = {"Origin": "https://board.example", "X-Forwarded-Host": "board.example"}
    assert _hook(client, proxied).status_code == 201
    assert len(client.get("/api/hooks").json()) == 3


def test_issue_44_cross_site_no_browser_header_and_reads_pass(client: TestClient) -> None:
    """curl, scripts and the CLI send neither header; a read is never refused for its site."""
    assert _hook(client, {}).status_code == 201
    listed = client.get("/api/hooks", headers={"Sec-Fetch-Site": "cross-site", "Origin": EVIL})
    assert listed.status_code == 200, listed.text
    assert len(listed.json()) == 1


def test_issue_44_cross_site_a_text_plain_form_post_through_the_proxy_is_refused(
    sqlite_url: str,
) -> None:
    """`--user-header`: the proxy names the signed-in admin from its cookie, which the browser
    sends with another site's `<form enctype=text/plain>` POST; the body parses as JSON."""
    lw = Laneway(sqlite_url)
    lw.json("init")
    lw.json("user", "add", "ada", "--role", "admin")
    form = json.dumps(STOLEN).encode()
    signed_in = {"X-Forwarded-User": "ada", "Content-Type": "text/plain"}
    with open_host(sqlite_url) as host:
        app = build_app(host, token=ADMIN, user_header="X-Forwarded-User")
        with TestClient(app) as c:
            for browser in ({"Sec-Fetch-Site": "cross-site", "Origin": EVIL}, {"Origin": EVIL}):
                answer = c.post("/api/hooks", content=form, headers={**signed_in, **browser})
                _refused(answer, "cross-site" if "Sec-Fetch-Site" in browser else EVIL)
            assert c.get("/api/hooks", headers=signed_in).json() == []
            # the board's own page, same request: it writes
            own = {**signed_in, "Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"}
            assert c.post("/api/hooks", content=form, headers=own).status_code == 201


def test_issue_44_cross_site_an_allowed_origin_may_write(sqlite_url: str) -> None:
    """`--allow-origin` turned CORS on for a page elsewhere: it may write; `*` trusts no one."""
    Laneway(sqlite_url).json("init")
    tools = "https://tools.example"
    with open_host(sqlite_url) as host:
        for allowed, writes in (([tools], True), (["*"], False)):
            app = build_app(host, token=ADMIN, allow_origins=allowed)
            with TestClient(app) as c:
                c.headers["Authorization"] = f"Bearer {ADMIN}"
                answer = _hook(c, {"Sec-Fetch-Site": "cross-site", "Origin": tools})
                assert answer.status_code == (201 if writes else 403), answer.text
                _refused(_hook(c, {"Sec-Fetch-Site": "cross-site", "Origin": EVIL}), "cross")


# -- names a person cannot put on what they write -------------------------------------------------


def _people(lw: Laneway) -> dict[str, str]:
    lw.json("init")
    return {
        name: lw.json("user", "add", name, "--role", "operator")["token"] for name in ("ada", "bob")
    }


def test_issue_44_a_persons_comment_is_theirs(db_url: str) -> None:
    lw = Laneway(db_url)
    tokens = _people(lw)
    lw.json("workflow", "create", "--template", "simple")
    task = lw.json("task", "create", "--workflow", "Kanban", "--title", "t")["id"]
    path = f"/api/tasks/{task}/comments"
    with open_host(db_url) as host, TestClient(build_app(host, token=ADMIN)) as c:
        ada = {"Authorization": f"Bearer {tokens['ada']}"}
        for given in ({}, {"author": "ada"}, {"author": "user:ada"}):
            made = c.post(path, json={"body": "mine", **given}, headers=ada)
            assert made.status_code == 201, made.text
            assert (made.json()["author"], made.json()["actor"]) == ("user:ada", "user:ada")
        for other in ("user:admin", "user:bob", "bob", "user", ""):
            refused = c.post(path, json={"body": "not mine", "author": other}, headers=ada)
            assert refused.status_code == 400, refused.text
            assert "'author'" in refused.json()["error"]
        # the admin token's scripts still post for whomever they name
        admin = {"Authorization": f"Bearer {ADMIN}"}
        script = c.post(path, json={"body": "relayed", "author": "github:octocat"}, headers=admin)
        assert script.json()["author"] == "github:octocat"
        assert c.post(path, json={"body": "plain"}, headers=admin).json()["author"] == "user"
        shown = [(x["author"], x["body"]) for x in c.get(path, headers=ada).json()]
    assert shown == [
        *[("user:ada", "mine")] * 3,
        ("github:octocat", "relayed"),
        ("user", "plain"),
    ]


def test_issue_44_a_persons_comment_through_the_proxy_is_theirs(sqlite_url: str) -> None:
    lw = Laneway(sqlite_url)
    _people(lw)
    lw.json("workflow", "create", "--template", "simple")
    task = lw.json("task", "create", "--workflow", "Kanban", "--title", "t")["id"]
    path = f"/api/tasks/{task}/comments"
    with open_host(sqlite_url) as host:
        app = build_app(host, token=ADMIN, user_header="X-Forwarded-User")
        with TestClient(app) as c:
            bob = {"X-Forwarded-User": "bob"}
            made = c.post(path, json={"body": "from the page"}, headers=bob)
            assert made.json()["author"] == "user:bob", made.text
            spoofed = c.post(path, json={"body": "x", "author": "user:ada"}, headers=bob)
            assert spoofed.status_code == 400, spoofed.text


def test_issue_44_a_persons_permission_answer_is_theirs(db_url: str, tmp_path: Path) -> None:
    lw = Laneway(db_url)
    tokens = _people(lw)
    with open_host(db_url) as host:
        task, session, run = session_with_run(host, tmp_path)
        asked = [
            host.permissions.request(
                task, session, run_id=run, tool_call={"title": f"edit {n}"}, options=OPTIONS
            ).id
            for n in range(3)
        ]
        with TestClient(build_app(host, token=ADMIN)) as c:
            ada = {"Authorization": f"Bearer {tokens['ada']}"}
            for other in ("user:ada-not", "user:bob", "user:admin", "user"):
                spoofed = {"outcome": "allow", "by": other}
                refused = c.post(f"/api/permissions/{asked[0]}", json=spoofed, headers=ada)
                assert refused.status_code == 400, refused.text
                assert "'by'" in refused.json()["error"]
            assert host.permissions.find(asked[0]).state == "pending"
            mine = c.post(f"/api/permissions/{asked[0]}", json={"outcome": "allow"}, headers=ada)
            assert mine.status_code == 200, mine.text
            assert (mine.json()["decided_by"], mine.json()["actor"]) == ("user:ada", "user:ada")
            named = {"outcome": "deny", "by": "ada"}
            denied = c.post(f"/api/permissions/{asked[1]}", json=named, headers=ada)
            assert denied.json()["decided_by"] == "user:ada", denied.text
            # the admin token's scripts answer for whomever they name
            admin = {"Authorization": f"Bearer {ADMIN}"}
            relayed = {"outcome": "allow", "by": "oncall-bot"}
            answered = c.post(f"/api/permissions/{asked[2]}", json=relayed, headers=admin)
            assert answered.json()["decided_by"] == "oncall-bot", answered.text
