"""The bundle: engine, registry and store, published together by one atomic swap.

Readers call `BundleHolder.current()` once per operation and use that bundle throughout, so a
dispatch never sees the registry of one build with the engine of another. Publishing replaces
the reference under a lock; CPython's reference assignment is atomic, so readers take no lock.
"""

from __future__ import annotations

import threading
from typing import Any

import attrs

from core.registry import Registry
from core.store.database import Store


@attrs.frozen
class Bundle:
    engine: Any
    """The trigger engine (`core.engine.Engine`), held by type-erased reference so that
    modules below the engine can read the bundle without importing it."""
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
