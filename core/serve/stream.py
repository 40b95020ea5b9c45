"""The live event stream: one pump per process reads the event log, every SSE client gets it.

The pump reads `board_events` after the last id it has seen and hands each event to the
subscribed connections. It wakes on a PostgreSQL NOTIFY (sent in the transaction that wrote
the events, so it arrives at their COMMIT), or on a short poll (SQLite, and PostgreSQL as a
fallback). A connection first catches up from the table itself (`Last-Event-ID`), then takes
the pump's events, skipping ids it already sent: every event once, in id order.

A connection whose queue overflows (a slow client) is not dropped: it is marked lagging and
catches up from the table, which holds everything, so memory stays bounded and nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

import attrs
from starlette.concurrency import run_in_threadpool

from core.logs import logger
from core.store import events
from core.store.events import Event

if TYPE_CHECKING:
    from core.host import Host

SQLITE_POLL_S: Final = 0.15
PG_FALLBACK_POLL_S: Final = 1.0
KEEPALIVE_S: Final = 15.0
QUEUE_MAX: Final = 1000
PAGE: Final = 500
PRUNE_EVERY_S: Final = 600.0


@attrs.define(eq=False)
class Subscriber:
    task_id: str | None
    queue: asyncio.Queue[Event] = attrs.field(factory=lambda: asyncio.Queue(QUEUE_MAX))
    lagging: bool = False

    def offer(self, event: Event) -> None:
        if self.task_id is not None and event.task_id != self.task_id:
            return
        if self.lagging:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.lagging = True  # it catches up from the table


class Hub:
    """The pump and its subscribers, for one `serve` process."""

    def __init__(self, host: Host, *, prune: bool) -> None:
        self.host = host
        self.subscribers: set[Subscriber] = set()
        self.stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._last_id = 0
        self._prune = prune
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._listener_stop = threading.Event()
        self._listener: threading.Thread | None = None

    # -- life ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._last_id = await run_in_threadpool(self._latest)
        self._tasks.append(asyncio.create_task(self._pump()))
        if self._prune:
            self._tasks.append(asyncio.create_task(self._pruner()))
        if not self.host.store.is_sqlite:
            self._listener = threading.Thread(
                target=self._listen, name="laneway-serve-listen", daemon=True
            )
            self._listener.start()

    def stop_soon(self) -> None:
        """Thread- and signal-safe: end every stream so the server can finish."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.stopping.set)
        self._listener_stop.set()

    async def close(self) -> None:
        self.stopping.set()
        self._listener_stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._listener is not None:
            await run_in_threadpool(self._listener.join, 3.0)

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

    async def _pump(self) -> None:
        poll = SQLITE_POLL_S if self.host.store.is_sqlite else PG_FALLBACK_POLL_S
        with contextlib.suppress(ValueError):
            # An override for tests and tuning: proves, with a long poll, that NOTIFY wakes us.
            poll = float(os.environ.get("LANEWAY_SERVE_POLL_S", poll))
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=poll)
            self._wake.clear()
            try:
                while True:
                    page = await run_in_threadpool(self._page, self._last_id, None)
                    for event in page:
                        for sub in self.subscribers:
                            sub.offer(event)
                    if page:
                        self._last_id = page[-1].id
                    if len(page) < PAGE:
                        break
            except Exception as exc:  # noqa: BLE001 - a database hiccup must not end the pump
                logger.bind(error=f"{type(exc).__name__}: {exc}").warning(
                    "event stream: reading the event log failed; retrying"
                )
                await asyncio.sleep(1.0)

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
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {events.CHANNEL}")
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

    async def stream(self, last_id: int | None, task_id: str | None) -> AsyncIterator[str]:
        """The SSE text of one connection: catch-up after `last_id`, then live events."""
        sub = Subscriber(task_id)
        self.subscribers.add(sub)
        try:
            if last_id is None:
                last_id = await run_in_threadpool(self._latest)
                catch_up = False
            else:
                catch_up = True
            yield "retry: 1000\n: laneway event stream\n\n"
            while not self.stopping.is_set():
                if catch_up or sub.lagging:
                    if sub.lagging:
                        sub.lagging = False
                        _drain(sub.queue)
                    catch_up = False
                    while True:
                        page = await run_in_threadpool(self._page, last_id, task_id)
                        for event in page:
                            yield sse(event)
                            last_id = event.id
                        if len(page) < PAGE:
                            break
                    continue
                live = await self._next(sub)
                if live is None:
                    if not self.stopping.is_set() and not sub.lagging:
                        yield ": keepalive\n\n"
                    continue
                if live.id <= last_id:
                    continue
                yield sse(live)
                last_id = live.id
        finally:
            self.subscribers.discard(sub)

    async def _next(self, sub: Subscriber) -> Event | None:
        """The subscriber's next event; None on keepalive time, stop, or lag."""
        if not sub.queue.empty():
            return sub.queue.get_nowait()
        getter = asyncio.ensure_future(sub.queue.get())
        stopper = asyncio.ensure_future(self.stopping.wait())
        try:
            done, _pending = await asyncio.wait(
                {getter, stopper}, timeout=KEEPALIVE_S, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stopper.cancel()
            if not getter.done():
                getter.cancel()
        if getter in done and not getter.cancelled():
            return getter.result()
        return None


def _drain(queue: asyncio.Queue[Event]) -> None:
    while not queue.empty():
        queue.get_nowait()


def sse(event: Event) -> str:
    data = json.dumps(event.as_json(), separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n"
