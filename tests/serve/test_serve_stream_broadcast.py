"""The event stream as a broadcaster (issue 28, docs/serve.md "How the stream reads them"):
each event encoded once for every connection, and a connection too slow to keep up dropped with
a last `stream.reconnect` event naming the last id it was sent, after which `Last-Event-ID`
resumes it from the table with nothing lost. The hub in process over a real database."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.concurrency import run_in_threadpool

from core.host import Host
from core.serve import stream
from core.serve.stream import Hub

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
