"""Issue 39 item 3: serve's limits hold against one client, whichever parser uvicorn runs
(httptools, a dependency, here). Before: httptools buffered a header line whole, so 20
connections sending 20 MB header lines took serve from 57 to 525 MB and a complete 20 MB head
was answered 200; one client holding 1,000 idle connections had 97.5 % of others' requests
answered 503; a malformed request line got uvicorn's plain-text 400.

Peers are told apart by their address: the attacker connects from 127.0.0.2, the others from
127.0.0.3 (the whole 127/8 is loopback on Linux). One real `serve` process per test."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serve.conftest import OfficeBoard, Served, start_serve

pytestmark = pytest.mark.slow

HEADS = 20
HEAD_LINE = 20 * 1024 * 1024
HOLD = 1000
ATTACKER, OTHER = "127.0.0.2", "127.0.0.3"


@pytest.fixture
def serving(office: OfficeBoard, tmp_path: Path) -> Iterator[Served]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < HOLD + 512 <= hard or hard == resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HOLD + 512), hard))
    running = start_serve(office.db, tmp_path)
    try:
        yield running
    finally:
        running.stop(signal.SIGKILL)


def _port(served: Served) -> int:
    return int(served.url.rsplit(":", 1)[1])


def _connect(served: Served, source: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", _port(served)))
    return sock


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one answer (the connection closes after it or has a
    Content-Length)."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    length = int(headers.get("content-length", "-1"))
    while length < 0 or len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_issue_39_item_3_twenty_heads_of_20_mb_bounded_and_refused(serving: Served) -> None:
    """20 connections each send a 20 MB header line (then the head's end): every one is
    answered a JSON 431 (400 from h11), none 200, and serve's peak memory grows by far less
    than the 400 MB sent."""
    before = _peak_rss_mb(serving.proc.pid)
    answers: list[tuple[int, dict[str, str], bytes] | BaseException] = []

    def one() -> None:
        sock = _connect(serving, OTHER)
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * HEAD_LINE + b"\r\n\r\n"

        def send() -> None:
            with contextlib.suppress(OSError):  # serve ends the connection mid-way
                sock.sendall(head)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            answers.append(_read_answer(sock))  # read while sending: it comes early
        except BaseException as exc:  # noqa: BLE001 - reported below
            answers.append(exc)
        finally:
            sender.join(60)
            sock.close()

    threads = [threading.Thread(target=one) for _ in range(HEADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    grown = _peak_rss_mb(serving.proc.pid) - before
    print(f"heads={HEADS}x{HEAD_LINE} peak_rss_growth_mb={grown:.1f}")
    assert len(answers) == HEADS
    for answer in answers:
        assert not isinstance(answer, BaseException), answer
        status, headers, body = answer
        assert status in (431, 400), (status, body[:200])
        assert headers["content-type"] == "application/json"
        shown = json.loads(body)
        assert shown["code"] in ("head_too_large", "bad_request"), shown
        assert "error" in shown
    assert grown < 32, grown  # before: 131.7 MB here, 468 MB in the issue
    assert serving.proc.poll() is None
    # and serve still answers
    with serving.client() as client:
        assert client.get("/api/info").status_code == 200


def test_issue_39_item_3_one_peer_holding_1000_connections_starves_no_other(
    serving: Served,
) -> None:
    """127.0.0.2 opens 1,000 connections and reopens each one serve closes, while 127.0.0.3
    makes 50 requests (healthz and an authenticated read): all 50 answered 200; the attacker's
    connections beyond its share are answered a JSON 503 and closed."""
    held: list[socket.socket] = []
    refused: list[tuple[int, dict[str, str], bytes]] = []
    stop = threading.Event()
    full = threading.Event()

    def attack() -> None:
        while not stop.is_set():
            for sock in list(held):
                sock.setblocking(False)
                try:
                    closed = sock.recv(1, socket.MSG_PEEK) == b""
                    if not closed and len(refused) < 5:
                        sock.setblocking(True)
                        refused.append(_read_answer(sock))
                        closed = True
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    held.remove(sock)
                    sock.close()
                else:
                    sock.setblocking(True)
            while len(held) < HOLD and not stop.is_set():
                try:
                    held.append(_connect(serving, ATTACKER))
                except OSError:
                    break
            full.set()
            stop.wait(0.2)

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    statuses: list[int] = []
    try:
        assert full.wait(120), "the attacker's connections"
        transport = httpx.HTTPTransport(local_address=OTHER)
        headers = {"Authorization": f"Bearer {serving.token}"}
        for n in range(50):
            with httpx.Client(
                base_url=serving.url, transport=transport, headers=headers, timeout=30
            ) as client:
                answer = client.get("/healthz" if n % 2 else "/api/info")
                statuses.append(answer.status_code)
            time.sleep(0.02)
    finally:
        stop.set()
        attacker.join(60)
        for sock in held:
            sock.close()
    print(f"other_peer_statuses={sorted(set(statuses))} answered_200={statuses.count(200)}/50")
    assert statuses == [200] * 50
    assert refused, "no refusal of the attacker's surplus was read"
    for status, answer_headers, body in refused:
        assert status == 503
        assert answer_headers["content-type"] == "application/json"
        assert json.loads(body)["code"] == "unavailable"


@pytest.mark.parametrize(
    "request_head",
    [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/9.9\x00\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n",
    ],
)
def test_issue_39_item_3_malformed_request_line_gets_the_json_400(
    serving: Served, request_head: bytes
) -> None:
    sock = _connect(serving, OTHER)
    try:
        sock.sendall(request_head)
        status, headers, body = _read_answer(sock)
    finally:
        sock.close()
    assert status == 400
    assert headers["content-type"] == "application/json"
    shown = json.loads(body)
    assert shown["code"] == "bad_request"
    assert shown["error"]
