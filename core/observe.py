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
from typing import TYPE_CHECKING

from core.logs import logger
from core.store.events import Event

if TYPE_CHECKING:
    from core.bundle import Bundle
    from core.plugin.calls import HookCall

HOOK = "laneway_event"


class Dispatch:
    """The store's `Observer`: the current bundle's `laneway_event` implementations."""

    def __init__(self, bundle: Callable[[], Bundle | None]) -> None:
        self._bundle = bundle
        self._queue: deque[Event] = deque()
        self._queue_lock = threading.Lock()
        self._delivering = threading.Lock()
        self._subscribers: dict[int, HookCall] = {}
        self._next_subscriber = 0

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Deliver each committed event to `callback` too, after the hook's implementations,
        in the same guard; returns what ends the subscription."""
        from core.plugin.calls import HookCall  # pluggy only once someone observes

        with self._queue_lock:
            key = self._next_subscriber
            self._next_subscriber += 1
            # a hook implementation is called with keywords; a callback takes the event as is
            call = HookCall(f"subscription-{key}", HOOK, lambda event: callback(event), ("event",))
            self._subscribers[key] = call

        def unsubscribe() -> None:
            with self._queue_lock:
                self._subscribers.pop(key, None)

        return unsubscribe

    def _implementations(self) -> list[HookCall]:
        """The hook's implementations in registration order, then the subscriptions."""
        from core.plugin.calls import registered_calls  # a read-only host never gets here

        with self._queue_lock:
            subscribers = list(self._subscribers.values())
        bundle = self._bundle()
        if bundle is None:
            return subscribers
        return [*registered_calls(bundle.registry.hooks.manager, HOOK), *subscribers]

    def wanted(self) -> bool:
        """Asked at every commit: answered without building the calls `deliver` needs."""
        if self._subscribers:
            return True
        bundle = self._bundle()
        hook = getattr(bundle.registry.hooks.manager.hook, HOOK, None) if bundle else None
        return hook is not None and bool(hook.get_hookimpls())

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


def deliver(calls: Sequence[HookCall], event: Event) -> None:
    """Call each implementation with `event`, each in its own guard (`calls.guarded`)."""
    from core.plugin.calls import guarded

    def failed(call: HookCall, exc: Exception) -> None:
        logger.bind(
            plugin=call.plugin,
            hook=HOOK,
            event_id=event.id,
            event_type=event.type,
            task_id=event.task_id,
            cause=f"{type(exc).__name__}: {exc}",
        ).opt(exception=exc).error("a plugin's event observer raised; the others still run")

    for _delivered in guarded(calls, lambda call: call(event=event), failed):
        pass
