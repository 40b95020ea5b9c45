"""A small stand-in for the few GitHub REST endpoints the `github` forge uses, on loopback (a
test double: the git parts of issue 40 are proved on real repositories).

    GET   /repos/O/N/pulls?head=O:BRANCH&state=all    (newest first)
    POST  /repos/O/N/pulls                            (422 while the branch has an open one)
    PATCH /repos/O/N/pulls/{n}                        (title, body; state: 422 on a merged one)
    GET   /repos/O/N/pulls/{n}
    GET   /repos/O/N/pulls/{n}/comments?per_page=K&page=P   (oldest first, `Link: rel="next"`)
    GET   /repos/O/N/pulls/{n}/reviews?per_page=K&page=P    (the same)
    GET   /repos/O/N/issues/{n}/comments?per_page=K&page=P  (the same: the conversation)

Each comment and review has its own list's id and a time (`created_at`, `submitted_at`) from
one clock, so the lists interleave as GitHub's do.

Every request needs `Authorization: Bearer <token>`; `fail_next` makes the next request answer
with a status of the test's choosing; `next_elsewhere` makes a page's next link point off the
API's host.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs


@attrs.define
class Forge:
    repo: str
    token: str
    url: str = ""
    pulls: dict[int, dict[str, Any]] = attrs.field(factory=dict)
    comments: dict[int, list[dict[str, Any]]] = attrs.field(factory=dict)
    reviews: dict[int, list[dict[str, Any]]] = attrs.field(factory=dict)
    conversation: dict[int, list[dict[str, Any]]] = attrs.field(factory=dict)
    ticks: int = 0
    opened: int = 0
    requests: list[tuple[str, str]] = attrs.field(factory=list)
    fail_next: tuple[int, str] | None = None
    next_elsewhere: bool = False
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def _now(self) -> str:
        self.ticks += 1
        hours, seconds = divmod(self.ticks, 3600)
        return f"2026-01-01T{hours:02d}:{seconds // 60:02d}:{seconds % 60:02d}Z"

    def review(self, number: int, path: str, line: int, body: str, login: str) -> None:
        """A comment on a line of the diff."""
        with self.lock:
            found = self.comments.setdefault(number, [])
            found.append(
                {"id": 1000 + len(found), "path": path, "line": line, "body": body,
                 "user": {"login": login, "type": "User"}, "created_at": self._now()}
            )  # fmt: skip

    def submit(self, number: int, state: str, body: str, login: str, bot: bool = False) -> None:
        """A review submitted with `state` (CHANGES_REQUESTED, APPROVED, COMMENTED, PENDING)
        and its summary `body`."""
        with self.lock:
            found = self.reviews.setdefault(number, [])
            found.append(
                {"id": 1000 + len(found), "state": state, "body": body,
                 "user": {"login": login, "type": "Bot" if bot else "User"},
                 "submitted_at": None if state == "PENDING" else self._now()}
            )  # fmt: skip

    def say(self, number: int, body: str, login: str, bot: bool = False) -> None:
        """A comment in the pull request's conversation."""
        with self.lock:
            found = self.conversation.setdefault(number, [])
            found.append(
                {"id": 1000 + len(found), "body": body,
                 "user": {"login": login, "type": "Bot" if bot else "User"},
                 "created_at": self._now()}
            )  # fmt: skip

    def merge(self, number: int) -> None:
        with self.lock:
            self.pulls[number].update(state="closed", merged=True)

    def close(self, number: int) -> None:
        with self.lock:
            self.pulls[number].update(state="closed")


def _handler(forge: Forge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def _answer(self, status: int, body: Any, link: str = "") -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            if link:
                self.send_header("Link", link)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            parsed = urllib.parse.urlsplit(self.path)
            with forge.lock:
                forge.requests.append((method, parsed.path))
                if self.headers.get("Authorization") != f"Bearer {forge.token}":
                    return self._answer(401, {"message": "Bad credentials"})
                if forge.fail_next is not None:
                    status, message = forge.fail_next
                    forge.fail_next = None
                    return self._answer(status, {"message": message})
                base = f"/repos/{forge.repo}/pulls"
                issue = parsed.path.removeprefix(f"/repos/{forge.repo}/issues/").split("/")
                if issue[1:] == ["comments"] and method == "GET" and issue[0].isdigit():
                    return self._page(parsed, forge.conversation.get(int(issue[0]), []))
                if parsed.path == base and method == "GET":
                    query = urllib.parse.parse_qs(parsed.query)
                    head = query.get("head", [""])[0].split(":", 1)[-1]
                    found = [p for p in forge.pulls.values() if p["head"]["ref"] == head]
                    return self._answer(200, found[::-1])
                if parsed.path == base and method == "POST":
                    assert body is not None
                    if any(
                        p["head"]["ref"] == body["head"] and p["state"] == "open"
                        for p in forge.pulls.values()
                    ):
                        exists = [{"message": "A pull request already exists"}]
                        return self._answer(422, {"message": "Validation Failed", "errors": exists})
                    forge.opened += 1
                    number = forge.opened
                    forge.pulls[number] = {
                        "number": number,
                        "html_url": f"{forge.url}/{forge.repo}/pull/{number}",
                        "state": "open",
                        "merged": False,
                        "title": body["title"],
                        "body": body["body"],
                        "draft": body.get("draft", False),
                        "head": {"ref": body["head"]},
                        "base": {"ref": body["base"]},
                    }
                    return self._answer(201, forge.pulls[number])
                rest = parsed.path.removeprefix(base + "/").split("/")
                if not rest[0].isdigit() or int(rest[0]) not in forge.pulls:
                    return self._answer(404, {"message": "Not Found"})
                pull = forge.pulls[int(rest[0])]
                if len(rest) == 1 and method == "PATCH":
                    assert body is not None
                    if "state" in body and pull["merged"]:
                        merged = "state cannot be changed. The pull request cannot be reopened"
                        return self._answer(422, {"message": "Validation Failed",
                                                  "errors": [{"message": merged}]})  # fmt: skip
                    pull.update({k: v for k, v in body.items() if k in ("title", "body", "state")})
                    return self._answer(200, pull)
                if len(rest) == 1 and method == "GET":
                    return self._answer(200, pull)
                if rest[1:] == ["comments"] and method == "GET":
                    return self._page(parsed, forge.comments.get(pull["number"], []))
                if rest[1:] == ["reviews"] and method == "GET":
                    return self._page(parsed, forge.reviews.get(pull["number"], []))
                return self._answer(404, {"message": "Not Found"})

        def _page(self, parsed: urllib.parse.SplitResult, every: list[dict[str, Any]]) -> None:
            query = urllib.parse.parse_qs(parsed.query)
            size = int(query.get("per_page", ["30"])[0])
            page = int(query.get("page", ["1"])[0])
            link = ""
            if page * size < len(every):
                host = "http://elsewhere.invalid" if forge.next_elsewhere else forge.url
                link = f'<{host}{parsed.path}?per_page={size}&page={page + 1}>; rel="next"'
            return self._answer(200, every[(page - 1) * size : page * size], link)

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

    return Handler


@contextmanager
def github(repo: str = "acme/app", token: str = "good-token") -> Iterator[Forge]:
    forge = Forge(repo, token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(forge))
    forge.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield forge
    finally:
        server.shutdown()
        server.server_close()
