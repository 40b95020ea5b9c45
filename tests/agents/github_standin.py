"""A small stand-in for the few GitHub REST endpoints the `github` forge uses, on loopback (a
test double: the git parts of issue 40 are proved on real repositories).

    GET   /repos/O/N/pulls?head=O:BRANCH&state=all    (newest first)
    POST  /repos/O/N/pulls                            (422 while the branch has an open one)
    PATCH /repos/O/N/pulls/{n}                        (title, body; state: 422 on a merged one)
    GET   /repos/O/N/pulls/{n}
    GET   /repos/O/N/pulls/{n}/comments?per_page=K&page=P   (oldest first, `Link: rel="next"`)

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
    opened: int = 0
    requests: list[tuple[str, str]] = attrs.field(factory=list)
    fail_next: tuple[int, str] | None = None
    next_elsewhere: bool = False
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def review(self, number: int, path: str, line: int, body: str, login: str) -> None:
        with self.lock:
            found = self.comments.setdefault(number, [])
            found.append(
                {"id": 1000 + len(found), "path": path, "line": line, "body": body,
                 "user": {"login": login}}
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
                    query = urllib.parse.parse_qs(parsed.query)
                    size = int(query.get("per_page", ["30"])[0])
                    page = int(query.get("page", ["1"])[0])
                    every = forge.comments.get(pull["number"], [])
                    link = ""
                    if page * size < len(every):
                        host = "http://elsewhere.invalid" if forge.next_elsewhere else forge.url
                        link = (f'<{host}{parsed.path}?per_page={size}&page={page + 1}>; '
                                'rel="next"')  # fmt: skip
                    return self._answer(200, every[(page - 1) * size : page * size], link)
                return self._answer(404, {"message": "Not Found"})

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
