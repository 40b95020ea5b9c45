"""Issue 42's bad input for webhooks: a private key given as the secret, a receiver answering a
100 MB body, a receiver redirecting to itself forever. Each is one line or a bounded delivery,
on both databases."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from core.services.hooks import MAX_SECRET, Deliverer
from tests.cli.conftest import Laneway
from tests.conftest import eventually, open_host

KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    + "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n" * 40
    + "-----END OPENSSH PRIVATE KEY-----\n"
)


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANEWAY_HOOK_RETRY_BASE", "0.2")


@pytest.fixture
def board(laneway: Laneway) -> Laneway:
    laneway.json("workflow", "create", "--template", "simple")
    return laneway


@contextmanager
def _server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


def test_issue_42_a_private_key_as_the_secret_is_one_line(board: Laneway) -> None:
    """`--secret-env` naming a variable that holds a key file: refused, nothing stored."""
    line = board.fails(
        "hook", "add", "http://127.0.0.1:9/x", "--secret-env", "KEYFILE", env={"KEYFILE": KEY}
    )
    assert line.count("\n") == 0
    assert "key file, not a shared secret" in line
    assert "PRIVATE" not in line  # the key is never echoed back
    long = board.fails(
        "hook",
        "add",
        "http://127.0.0.1:9/x",
        "--secret-env",
        "LONG",
        env={"LONG": "x" * (MAX_SECRET + 1)},
    )
    assert f"at most {MAX_SECRET}" in long
    assert board.json("hook", "list") == []


def test_issue_42_a_receiver_answering_100_mb_is_delivered_reading_a_bounded_part(
    board: Laneway,
) -> None:
    """A 2xx whose body claims 100 MB: delivered once; the deliverer reads a bounded part and
    hangs up instead of taking the whole answer."""
    sent = {"bytes": 0, "requests": 0}
    size = 100 * 1024 * 1024

    class Huge(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            sent["requests"] += 1
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"x" * 65536
            try:
                for _ in range(size // len(chunk)):
                    self.wfile.write(chunk)
                    sent["bytes"] += len(chunk)
            except OSError:
                pass  # the deliverer hung up: what this test wants

        def log_message(self, *_args: Any) -> None:
            pass

    with _server(Huge) as url:
        board.json("hook", "add", url, "--events", "task.created")
        board.json("task", "create", "--workflow", "Kanban", "--title", "huge answer")
        with open_host(board.url) as host, Deliverer(host.store):
            eventually(
                lambda: board.json("hook", "deliveries", "--state", "delivered"),
                timeout=60,
                what="the delivery recorded delivered",
            )
    [delivery] = board.json("hook", "deliveries")
    assert (delivery["state"], delivery["attempts"], delivery["last_status"]) == (
        "delivered",
        1,
        200,
    )
    assert sent["requests"] == 1
    assert sent["bytes"] < size  # it never took the whole answer


def test_issue_42_a_receiver_redirecting_in_a_loop_is_never_followed(board: Laneway) -> None:
    """A 302 to itself: not followed (one request per attempt), not delivered, retried."""
    got = {"requests": 0}

    class Loop(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got["requests"] += 1
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    with _server(Loop) as url:
        board.json("hook", "add", url, "--events", "task.created")
        board.json("task", "create", "--workflow", "Kanban", "--title", "redirected")
        with open_host(board.url) as host, Deliverer(host.store):
            eventually(
                lambda: [d for d in board.json("hook", "deliveries") if d["attempts"] >= 2],
                timeout=60,
                what="two attempts",
            )
    [delivery] = board.json("hook", "deliveries")
    assert delivery["state"] == "pending"
    assert delivery["last_status"] == 302
    # every request was an attempt of its own (an attempt counts at its claim, so the last may
    # not have reached the receiver when the deliverer stopped): none followed the Location
    assert delivery["attempts"] - 1 <= got["requests"] <= delivery["attempts"]


def test_issue_42_a_receiver_answering_a_byte_at_a_time_is_cut_off_before_its_lease_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A receiver that answers one byte at a time keeps every read inside the read timeout,
    so a send went on past its claim's lease, and another process sent the same delivery
    meanwhile. A send is cut off whole after `SEND_S` (here 1 s; the receiver would drip for
    a minute): the attempt fails, to be retried, well inside the lease."""
    from core.services import hooks

    assert hooks.SEND_S < hooks.LEASE_S
    monkeypatch.setattr(hooks, "SEND_S", 1.0)
    dripping = threading.Event()
    finished = threading.Event()

    class Drip(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                self.wfile.flush()
                dripping.set()
                for _ in range(600):
                    self.wfile.write(b"X-Slow: a\r\n")
                    self.wfile.flush()
                    finished.wait(0.1)
            except OSError:
                return  # the deliverer hung up: what this test wants
            finished.set()

        def log_message(self, *_args: Any) -> None:
            pass

    with _server(Drip) as url, pytest.raises((OSError, hooks.http.client.HTTPException)):
        hooks.post(url, b"{}", {"Content-Type": "application/json"})
    assert dripping.is_set()
    assert not finished.is_set()  # cut off while it still dripped


def test_issue_42_a_name_the_resolver_never_answers_is_given_up_within_the_connect_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hook's host name is looked up before the connection has a socket, so the whole-send
    cut could not end a lookup the resolver never answered: the sender waited for as long as
    the system resolver retried. The lookup is bounded by the connect timeout (here 0.5 s;
    the resolver would hang a minute): the attempt fails, to be retried, naming the host."""
    from core.services import hooks

    monkeypatch.setattr(hooks, "TIMEOUT_S", 0.5)
    real = hooks.socket.getaddrinfo
    released = threading.Event()

    def hanging(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.stuck.example":
            released.wait(60)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(hooks.socket, "getaddrinfo", hanging)
    try:
        with pytest.raises(TimeoutError, match=r"looking up hooks\.stuck\.example took more"):
            hooks.post("https://hooks.stuck.example/x", b"{}", {})
    finally:
        released.set()


def test_issue_42_a_looked_up_name_is_sent_to_under_its_own_name() -> None:
    """The connection goes to the addresses looked up, and the request still names the host
    it was sent to (`Host: localhost:PORT`), as before the lookup was bounded."""
    from core.services import hooks

    seen: list[str] = []

    class Ok(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append(self.headers["Host"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    with _server(Ok) as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        status = hooks.post(f"http://localhost:{port}/hook", b"{}", {})
    assert status == 204
    assert seen == [f"localhost:{port}"]
