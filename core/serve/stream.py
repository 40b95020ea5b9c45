"""The live event stream: one pump per process reads the event log, every SSE client gets it.

The pump reads `board_events` after the last id it has seen, encodes each event once, and
publishes the encoded bytes to a `Broadcast`: one bounded buffer shared by every connection.
It wakes on a PostgreSQL NOTIFY (sent in the transaction that wrote the events, so it arrives
at their COMMIT), on SQLite on a byte its wake-up socket is sent after such a COMMIT
(`core.store.wake`, read by the event loop itself), and on a poll as the fallback (a short one,
with a stat of the write-ahead log, on a SQLite board where no socket could be had). A
connection first catches up from the table itself (`Last-Event-ID`), then follows the buffer
from where it subscribed, skipping ids it already sent: every event once, in id order. Each
wake hands a connection everything new as one write (up to `CHUNK_BYTES`), the same bytes
every other connection is handed: joined once per batch (`Recent`) for all the connections that
were waiting when it came. What a wake costs per connection is one future resolved and one
`send` (`StreamResponse`); one timer, not one per connection and wait, ticks the keepalives.

A connection that falls more than `KEEP` events behind the buffer (a client too slow to
read) is dropped: it is sent a last `stream.reconnect` event naming the last id it was sent,
and the stream ends; the client reconnects with `Last-Event-ID` and catches up from the table.
So serve's memory for the stream is the one buffer (at most `KEEP` events, shared), plus at
most one chunk in flight per connection: it does not grow with a slow client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from core import ids
from core.logs import logger
from core.store import dialect, events, wake
from core.store.dialect import sqlite_path
from core.store.events import Event

if TYPE_CHECKING:
    from core.host import Host

SQLITE_POLL_S: Final = 0.15
SQLITE_WATCH_S: Final = 0.02
"""Without a wake-up socket, how often the pump looks at a SQLite board's write-ahead log: a
commit changes the file, so a stat (no query) tells the pump to read; the poll stays as the
fallback."""
PG_FALLBACK_POLL_S: Final = 1.0
KEEPALIVE_S: Final = 15.0
PAGE: Final = 500
PRUNE_EVERY_S: Final = 600.0
KEEP: Final = 10_000
"""Events the shared buffer holds: how far behind a connection may fall before it is dropped
(at a busy board's 1,000 events a second, ten seconds)."""
CHUNK_BYTES: Final = 256 * 1024
RECONNECT: Final = "stream.reconnect"
SEND_KEY: Final = "laneway.send"
"""Where the application (`core.serve.app.App`) leaves the server's own `send` in the scope:
a stream's body chunks skip the error and exception middlewares' wrappers, which only note
that the response started (its start still passes through them)."""
KEEPALIVE: Final = b": keepalive\n\n"


@attrs.frozen
class Encoded:
    id: int
    task_id: str | None
    data: bytes


class Behind(Exception):
    """The connection fell out of the buffer: it must reconnect and catch up from the table."""


@attrs.frozen
class Recent:
    """The last batch published, joined once: what every connection that was waiting at its
    start, with no task filter, is sent (the same bytes object for all of them)."""

    start: int
    end: int
    first_id: int
    last_id: int
    data: bytes


class Broadcast:
    """The encoded events every connection reads, held once: a list with a moving start."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self.items: list[Encoded] = []
        self.first = 0
        """The position (a count of everything published) of `items[0]`."""
        self.recent: Recent | None = None
        self.ticks = 0
        """Keepalive ticks so far (`Hub._keepalive`)."""
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def end(self) -> int:
        return self.first + len(self.items)

    def publish(self, batch: list[Encoded]) -> None:
        if not batch:
            return
        start = self.end
        self.items.extend(batch)
        if len(self.items) > 2 * self.keep:  # trim in steps: a cut costs a copy of the list
            cut = len(self.items) - self.keep
            del self.items[:cut]
            self.first += cut
        data = batch[0].data if len(batch) == 1 else b"".join(e.data for e in batch)
        self.recent = (
            Recent(start, self.end, batch[0].id, batch[-1].id, data)
            if len(data) <= CHUNK_BYTES
            else None
        )
        self.wake_all()

    def waiter(self) -> asyncio.Future[None]:
        """A future resolved at the next publish, tick or stop. One per waiting connection, so
        one connection's cancelled wait cancels no other's; the list is emptied at each wake
        (a done one is skipped), never searched."""
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    def wake_all(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def since(self, position: int, limit_bytes: int = CHUNK_BYTES) -> tuple[list[Encoded], int]:
        """The events from `position` (up to about `limit_bytes`) and the position after."""
        if position < self.end - self.keep or position < self.first:
            raise Behind
        out: list[Encoded] = []
        size = 0
        at = position
        for item in self.items[position - self.first :]:
            out.append(item)
            size += len(item.data)
            at += 1
            if size >= limit_bytes:
                break
        return out, at


class Hub:
    """The pump and its subscribers, for one `serve` process."""

    def __init__(self, host: Host, *, prune: bool, keep: int = KEEP) -> None:
        self.host = host
        self.broadcast = Broadcast(keep)
        self.connections = 0
        self.stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._last_id = 0
        self._prune = prune
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._listener_stop = threading.Event()
        self._listener: threading.Thread | None = None
        self._waiter: wake.Waiter | None = None
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="laneway-serve-pump")
        """The pump's reads, on a thread of its own: a hop there and back costs a fraction of
        the thread pool's (a capacity limiter, a run variable, a token per call)."""

    # -- life ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        db = sqlite_path(self.host.store.url) if self.host.store.is_sqlite else None
        if db is not None:
            # bound before the first read: a commit after it wakes the pump
            waiter = wake.Waiter(db)
            if waiter.usable:
                self._waiter = waiter
                self._loop.add_reader(waiter.fileno(), self._woken)
        self._last_id = await run_in_threadpool(self._latest)
        self._tasks.append(asyncio.create_task(self._pump()))
        self._tasks.append(asyncio.create_task(self._keepalive()))
        if self._prune:
            self._tasks.append(asyncio.create_task(self._pruner()))
        if not self.host.store.is_sqlite:
            self._listener = threading.Thread(
                target=self._listen, name="laneway-serve-listen", daemon=True
            )
            self._listener.start()
        elif db is not None and self._waiter is None:
            self._tasks.append(asyncio.create_task(self._watch(Path(f"{db}-wal"))))

    def stop_soon(self) -> None:
        """Thread- and signal-safe: end every stream so the server can finish."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop)
        self._listener_stop.set()

    def _stop(self) -> None:
        self.stopping.set()
        self.broadcast.wake_all()

    async def close(self) -> None:
        self._stop()
        self._listener_stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._reader.shutdown(wait=False, cancel_futures=True)
        if self._listener is not None:
            await run_in_threadpool(self._listener.join, 3.0)
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(waiter.fileno())
            waiter.close()

    def _woken(self) -> None:
        """SQLite: a commit of events sent the wake-up socket a byte (on the loop's thread)."""
        if self._waiter is not None and self._waiter.drain():
            self._wake.set()

    async def _watch(self, wal: Path) -> None:
        """Wake the pump when the write-ahead log changed (any process's commit)."""
        seen: tuple[int, int] | None = None
        while not self.stopping.is_set():
            try:
                found = wal.stat()
                now = (found.st_mtime_ns, found.st_size)
            except OSError:
                now = None  # checkpointed away, or not made yet: the poll covers it
            if now != seen and seen is not None:
                self._wake.set()
            seen = now
            await asyncio.sleep(SQLITE_WATCH_S)

    def wake(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    # -- reading the table --------------------------------------------------------------------

    def _latest(self) -> int:
        with self.host.store.read() as conn:
            return events.latest_id(conn)

    def _page(self, after: int, task_id: str | None) -> list[Event]:
        with self.host.store.read() as conn:
            return events.after(conn, after, task_id=task_id, limit=PAGE)

    def _encoded_page(self, after: int) -> list[Encoded]:
        # Encoded here, on the worker thread, once for every connection.
        return [Encoded(e.id, e.task_id, sse(e).encode()) for e in self._page(after, None)]

    async def _pump(self) -> None:
        if not self.host.store.is_sqlite:
            poll = PG_FALLBACK_POLL_S
        else:
            poll = wake.FALLBACK_S if self._waiter is not None else SQLITE_POLL_S
        with contextlib.suppress(ValueError):
            # An override for tests and tuning: proves, with a long poll, that NOTIFY wakes us.
            poll = float(os.environ.get("LANEWAY_SERVE_POLL_S", poll))
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await self._wake.wait()
            self._wake.clear()
            try:
                while True:
                    page = await loop.run_in_executor(
                        self._reader, self._encoded_page, self._last_id
                    )
                    self.broadcast.publish(page)
                    if page:
                        self._last_id = page[-1].id
                    if len(page) < PAGE:
                        break
            except Exception as exc:  # noqa: BLE001 - a database hiccup must not end the pump
                logger.bind(error=f"{type(exc).__name__}: {exc}").warning(
                    "event stream: reading the event log failed; retrying"
                )
                await asyncio.sleep(1.0)

    async def _keepalive(self) -> None:
        """One timer for every stream (not one per stream and wait): a tick each half
        `KEEPALIVE_S`."""
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), timeout=KEEPALIVE_S / 2)
            self.broadcast.ticks += 1
            self.broadcast.wake_all()

    async def _pruner(self) -> None:
        while not self.stopping.is_set():
            try:
                removed = await run_in_threadpool(events.prune, self.host.store)
                if removed:
                    logger.bind(removed=removed).info("event log pruned")
            except Exception as exc:  # noqa: BLE001 - pruning is housekeeping; try again later
                logger.bind(error=f"{type(exc).__name__}: {exc}").warning("event log prune failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), timeout=PRUNE_EVERY_S)

    def _listen(self) -> None:
        """PostgreSQL: LISTEN on a connection of its own; each NOTIFY wakes the pump."""
        import psycopg

        url = self.host.store.url.set(drivername="postgresql")
        dsn = url.render_as_string(hide_password=False)
        while not self._listener_stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True, **dialect.pg_connect_args(url)) as conn:
                    # It sits idle between notifications by design: a server's
                    # `idle_session_timeout` must not end it (and warn) every few seconds.
                    exempt = (
                        "SET idle_session_timeout = 0; "
                        if conn.info.server_version >= 140000
                        else ""
                    )
                    conn.execute(f"{exempt}LISTEN {events.CHANNEL}")
                    self.wake()  # anything committed while we were connecting
                    while not self._listener_stop.is_set():
                        for _note in conn.notifies(timeout=0.5):
                            self.wake()
            except Exception as exc:  # noqa: BLE001 - fall back to polling, then reconnect
                logger.bind(error=f"{type(exc).__name__}: {exc}").warning(
                    "event stream: LISTEN connection lost; polling until it is back"
                )
                self._listener_stop.wait(2.0)

    # -- one connection -----------------------------------------------------------------------

    async def stream(self, last_id: int | None, task_id: str | None) -> AsyncGenerator[bytes, None]:
        """The SSE bytes of one connection: catch-up after `last_id`, then live events."""
        board = self.broadcast
        position = board.end  # subscribed first: nothing falls between catch-up and live
        self.connections += 1
        try:
            if last_id is None:
                last_id = await run_in_threadpool(self._latest)
                catch_up = False
            else:
                catch_up = True
            yield b"retry: 1000\n: laneway event stream\n\n"
            while catch_up and not self.stopping.is_set():
                page = await run_in_threadpool(self._page, last_id, task_id)
                if page:
                    yield "".join(sse(e) for e in page).encode()
                    last_id = page[-1].id
                catch_up = len(page) == PAGE
            ticks, quiet = board.ticks, False
            while not self.stopping.is_set():
                if position == board.end:  # nothing new: no buffer to look at, wait
                    await board.waiter()
                    if board.ticks != ticks and position == board.end:
                        # Every KEEPALIVE_S / 2 a tick; a stream quiet for a whole tick
                        # period is sent a comment: never more than KEEPALIVE_S of silence.
                        ticks = board.ticks
                        if quiet:
                            yield KEEPALIVE
                        quiet = True
                    continue
                recent = board.recent
                if (
                    recent is not None
                    and recent.start == position
                    and task_id is None
                    and recent.first_id > last_id
                ):
                    # The common case: waiting when the batch came, it needs all of it.
                    position, last_id, quiet = recent.end, recent.last_id, False
                    yield recent.data
                    continue
                try:
                    found, position = board.since(position)
                except Behind:
                    logger.bind(last_event_id=last_id, task=task_id).info(
                        "event stream: a client too slow to keep up was dropped"
                    )
                    yield reconnect(last_id)
                    return
                wanted = [
                    e for e in found if e.id > last_id and (task_id is None or e.task_id == task_id)
                ]
                if wanted:
                    last_id, quiet = wanted[-1].id, False
                    yield wanted[0].data if len(wanted) == 1 else b"".join(e.data for e in wanted)
        finally:
            self.connections -= 1


class StreamResponse(Response):
    """`GET /api/events`: a stream's chunks, each one `send` (no iterator wrapper, no task
    group around it). A second task waits for the client's disconnect and cancels the
    stream's (uvicorn's `send` to a closed connection returns quietly: without it, a gone
    client would be written to until the next keepalive... forever)."""

    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncGenerator[bytes, None]) -> None:
        self.chunks = chunks
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        streaming = asyncio.current_task()
        assert streaming is not None
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            streaming.cancel()

        watcher = asyncio.create_task(watch())
        body: Send = scope.get(SEND_KEY, send)
        try:
            async for chunk in self.chunks:
                await body({"type": "http.response.body", "body": chunk, "more_body": True})
            await body({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone:
                raise
            streaming.uncancel()  # the client left: a normal end, not an error to log
        finally:
            watcher.cancel()
            await self.chunks.aclose()


def reconnect(last_id: int) -> bytes:
    """The last event a dropped connection is sent: its id is the last one it was sent, so a
    client that resumes from the ids it saw resumes right."""
    data = {
        "id": last_id,
        "type": RECONNECT,
        "task_id": None,
        "at": ids.now(),
        "last_event_id": last_id,
        "reason": "too slow to keep up: reconnect with Last-Event-ID",
    }
    body = json.dumps(data, separators=(",", ":"))
    return f"id: {last_id}\nevent: {RECONNECT}\ndata: {body}\n\n".encode()


def sse(event: Event) -> str:
    data = json.dumps(event.as_json(), separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n"
