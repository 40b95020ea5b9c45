"""After-commit delivery of board events to the plugins' `laneway_event` hook.

The store queues each transaction's events under its writer lock (so the queue holds them in
commit order) and asks `Dispatch.drain` to deliver them once the lock is free. One thread
delivers at a time, oldest first; a thread that commits while another delivers leaves its
events to that one, and an observer that itself writes finds its own events delivered after
the one it is handling. Every implementation is called in its own guard: one that raises is
logged with its plugin's name and the others still get the event.

A host-level subscription (`Host.subscribe`) is delivered the same way, after the hook's
implementations. When no loaded plugin implements the hook and nothing subscribed, `wanted` is
False and the store does none of this.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from core.logs import logger
from core.store.events import Event

if TYPE_CHECKING:
    from core.bundle import Bundle

HOOK = "laneway_event"


class Dispatch:
    """The store's `Observer`: the current bundle's `laneway_event` implementations."""

    def __init__(self, bundle: Callable[[], Bundle | None]) -> None:
        self._bundle = bundle
        self._queue: deque[Event] = deque()
        self._queue_lock = threading.Lock()
        self._delivering = threading.Lock()
        self._subscribers: dict[int, _Subscriber] = {}
        self._next_subscriber = 0

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Deliver each committed event to `callback` too, after the hook's implementations,
        in the same guard; returns what ends the subscription."""
        with self._queue_lock:
            key = self._next_subscriber
            self._next_subscriber += 1
            self._subscribers[key] = _Subscriber(callback, key)

        def unsubscribe() -> None:
            with self._queue_lock:
                self._subscribers.pop(key, None)

        return unsubscribe

    def _implementations(self) -> list[Any]:
        with self._queue_lock:
            subscribers: list[Any] = list(self._subscribers.values())
        bundle = self._bundle()
        if bundle is None:
            return subscribers
        hook = getattr(bundle.registry.hooks.manager.hook, HOOK, None)
        return [*(hook.get_hookimpls() if hook is not None else []), *subscribers]

    def wanted(self) -> bool:
        return bool(self._implementations())

    def committed(self, events: Sequence[Event]) -> None:
        with self._queue_lock:
            self._queue.extend(events)

    def drain(self) -> None:
        while self._delivering.acquire(blocking=False):
            try:
                while (event := self._next()) is not None:
                    deliver(self._implementations(), event)
            finally:
                self._delivering.release()
            with self._queue_lock:
                if not self._queue:  # else: queued while we let go; deliver it too
                    return

    def _next(self) -> Event | None:
        with self._queue_lock:
            return self._queue.popleft() if self._queue else None


class _Subscriber:
    """A host-level subscription, shaped as a hook implementation for `deliver`."""

    argnames = ("event",)

    def __init__(self, callback: Callable[[Event], object], key: int) -> None:
        self.function = callback
        self.plugin_name = f"subscription-{key}"


def deliver(implementations: Sequence[Any], event: Event) -> None:
    """Call each implementation with `event`, each in its own guard."""
    for impl in implementations:
        try:
            impl.function(*[{"event": event}[name] for name in impl.argnames])
        except Exception as exc:  # noqa: BLE001 - one observer never stops the others
            logger.bind(
                plugin=impl.plugin_name,
                hook=HOOK,
                event_id=event.id,
                event_type=event.type,
                task_id=event.task_id,
                cause=f"{type(exc).__name__}: {exc}",
            ).opt(exception=exc).error("a plugin's event observer raised; the others still run")
