"""The event stream as a broadcaster (issue 28, docs/serve.md "How the stream reads them"):
each event encoded once for every connection, and a connection too slow to keep up dropped with
a last `stream.reconnect` event naming the last id it was sent, after which `Last-Event-ID`
resumes it from the table with nothing lost. The hub in process over a real database."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.concurrency import run_in_threadpool

from core.host import Host
from core.serve import stream
from core.serve.stream import Hub
from tests.conftest import open_host

KEEP = 20
LATER = 30


def _events(chunk: bytes) -> list[dict[str, Any]]:
    found = []
    for block in chunk.decode().split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if "data" in fields:
            found.append(
                {"id": int(fields["id"]), "event": fields["event"], **json.loads(fields["data"])}
            )
    return found


async def _take(connection: AsyncIterator[bytes], count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(30):
        while len(got) < count:
            got += _events(await anext(connection))
    return got


def test_events_are_encoded_once_and_a_slow_client_is_dropped_then_resumes(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28, a stream that keeps up: N events to two connections cost N encodings; the
    connection that stopped reading while more than the buffer's worth arrived gets
    `stream.reconnect` (its id: the last event it was sent) and its stream ends; resuming
    from that id gives exactly the events the fast connection got meanwhile."""
    wf = host.workflows.create_from_template("simple")
    encoded = 0
    real_sse = stream.sse

    def counting(event: Any) -> str:
        nonlocal encoded
        encoded += 1
        return real_sse(event)

    monkeypatch.setattr(stream, "sse", counting)

    def create(count: int) -> None:
        for n in range(count):
            host.tasks.create(workflow=wf.id, title=f"Streamed {n}")

    async def scenario() -> None:
        hub = Hub(host, prune=False, keep=KEEP)
        await hub.start()
        try:
            fast = hub.stream(None, None)
            slow = hub.stream(None, None)
            for connection in (fast, slow):
                assert (await anext(connection)).startswith(b"retry: 1000\n")
            await run_in_threadpool(create, 5)
            first = await _take(fast, 5)
            assert await _take(slow, 5) == first
            assert encoded == 5, "each event encoded once for both connections"

            later: list[dict[str, Any]] = []
            for _ in range(3):  # the slow one reads none of these; the fast one keeps up
                await run_in_threadpool(create, 10)
                later += await _take(fast, 10)
            assert encoded == LATER + 5
            assert [e["type"] for e in later] == ["task.created"] * (LATER)

            dropped = _events(await anext(slow))
            assert [(e["event"], e["type"]) for e in dropped] == [
                ("stream.reconnect", "stream.reconnect")
            ]
            assert dropped[0]["id"] == dropped[0]["last_event_id"] == first[-1]["id"]
            with pytest.raises(StopAsyncIteration):
                await anext(slow)
            assert hub.connections == 1

            resumed = hub.stream(first[-1]["id"], None)
            assert (await anext(resumed)).startswith(b"retry: 1000\n")
            assert await _take(resumed, LATER) == later
            await resumed.aclose()
            await fast.aclose()
            assert hub.connections == 0
        finally:
            await hub.close()

    asyncio.run(scenario())


def test_a_commit_to_a_sqlite_board_wakes_the_stream_before_the_poll(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22, agent output seen as it happens: on SQLite a commit by another connection (any
    process) changes the write-ahead log, and the pump reads at once - with the poll set to a
    minute, the event still reaches a connection in well under a second."""
    monkeypatch.setenv("LANEWAY_SERVE_POLL_S", "60")
    with open_host(sqlite_url) as serving, open_host(sqlite_url) as writer:
        wf = writer.workflows.create_from_template("simple")

        async def scenario() -> float:
            hub = Hub(serving, prune=False)
            await hub.start()
            try:
                connection = hub.stream(None, None)
                assert (await anext(connection)).startswith(b"retry: 1000\n")
                await asyncio.sleep(0.1)  # the watch has seen the log as it stands
                began = time.monotonic()
                await run_in_threadpool(writer.tasks.create, workflow=wf.id, title="Woken")
                (event,) = await asyncio.wait_for(_take(connection, 1), timeout=10)
                assert event["type"] == "task.created"
                await connection.aclose()
                return time.monotonic() - began
            finally:
                await hub.close()

        assert asyncio.run(scenario()) < 1.0


def test_issue_45_item_3_a_quiet_stream_gets_keepalives_from_the_shared_tick_and_a_busy_one_none(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45 item 3: one keepalive timer ticks for every stream (no timer per stream and
    wait). A stream with nothing to send gets a `: keepalive` comment within `KEEPALIVE_S`;
    one that is sent events meanwhile gets the events, and no comment while they flow."""
    monkeypatch.setattr(stream, "KEEPALIVE_S", 0.4)
    with open_host(sqlite_url) as host:
        wf = host.workflows.create_from_template("simple")

        async def scenario() -> None:
            hub = Hub(host, prune=False)
            await hub.start()
            try:
                quiet = hub.stream(None, None)
                busy = hub.stream(None, None)
                for connection in (quiet, busy):
                    assert (await anext(connection)).startswith(b"retry: 1000\n")
                # the first thing the quiet stream is sent is the shared tick's comment (the
                # timeout only catches a hang: a loaded machine may stretch the tick)
                async with asyncio.timeout(10):
                    assert await anext(quiet) == stream.KEEPALIVE
                sent: list[bytes] = []

                async def follow() -> None:
                    while True:
                        sent.append(await anext(busy))

                reading = asyncio.create_task(follow())
                for n in range(8):  # events every 0.1 s: never a whole tick period quiet
                    await run_in_threadpool(host.tasks.create, workflow=wf.id, title=f"Busy {n}")
                    await asyncio.sleep(0.1)
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
                assert stream.KEEPALIVE not in sent[1:]
                assert sum(len(_events(chunk)) for chunk in sent) == 8
                await quiet.aclose()
                await busy.aclose()
            finally:
                await hub.close()

        asyncio.run(scenario())


def test_issue_45_item_3_the_stream_response_ends_quietly_when_its_client_leaves(
    sqlite_url: str,
) -> None:
    """Issue 45 item 3: `GET /api/events` is a plain ASGI response (one send a chunk). A
    client that disconnects ends its stream at once, with no error, and frees its place in
    the hub; a stream still open when serve stops is finished (the last empty body)."""
    with open_host(sqlite_url) as host:

        async def scenario() -> None:
            hub = Hub(host, prune=False)
            await hub.start()
            try:
                leaving = asyncio.Event()
                messages: list[dict[str, Any]] = []

                async def receive() -> dict[str, Any]:
                    await leaving.wait()
                    return {"type": "http.disconnect"}

                async def never() -> dict[str, Any]:
                    await asyncio.Event().wait()
                    return {"type": "http.disconnect"}

                async def send(message: Any) -> None:
                    messages.append(message)

                scope = {"type": "http", "method": "GET"}
                left = asyncio.create_task(
                    stream.StreamResponse(hub.stream(None, None))(scope, receive, send)
                )
                kept: list[dict[str, Any]] = []

                async def keep(message: Any) -> None:
                    kept.append(message)

                stays = asyncio.create_task(
                    stream.StreamResponse(hub.stream(None, None))(scope, never, keep)
                )
                async with asyncio.timeout(10):
                    while hub.connections < 2 or len(messages) < 2 or len(kept) < 2:
                        await asyncio.sleep(0.01)
                assert messages[0]["type"] == "http.response.start"
                assert messages[0]["status"] == 200
                assert messages[1]["body"].startswith(b"retry: 1000\n")
                leaving.set()
                async with asyncio.timeout(10):
                    await left  # returns: no CancelledError, no exception
                assert hub.connections == 1
                hub.stop_soon()
                async with asyncio.timeout(10):
                    await stays
                assert kept[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
                assert hub.connections == 0
            finally:
                await hub.close()

        asyncio.run(scenario())
