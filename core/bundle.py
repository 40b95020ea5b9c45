"""The bundle: registry and store, published together by one atomic swap.

Readers call `BundleHolder.current()` once per operation and use that bundle throughout, so a
dispatch never sees the kinds of one build with the feature switches of another; the engine a
caller uses is built on the registry of the bundle it read (`Host.engine_for`). Publishing replaces
the reference under a lock; CPython's reference assignment is atomic, so readers take no lock.
"""

from __future__ import annotations

import threading

import attrs

from core.registry import Registry
from core.store.database import Store


@attrs.frozen
class Bundle:
    registry: Registry
    store: Store
    generation: int = 0


class BundleHolder:
    def __init__(self, bundle: Bundle) -> None:
        self._bundle = bundle
        self._lock = threading.Lock()

    def current(self) -> Bundle:
        return self._bundle

    def publish(self, bundle: Bundle) -> Bundle:
        with self._lock:
            bundle = attrs.evolve(bundle, generation=self._bundle.generation + 1)
            self._bundle = bundle
        return bundle
