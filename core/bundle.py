"""The bundle: engine, registry and store, published together by one atomic swap.

Readers call `BundleHolder.current()` once per operation and use that bundle throughout, so a
dispatch never sees the registry of one build with the engine of another. The layers below the
engine (the kernel's) see a bundle only as `core.kernel.Published`: its registry and store.
Publishing replaces the reference under a lock; CPython's reference assignment is atomic, so
readers take no lock.
"""

from __future__ import annotations

import threading

import attrs

from core.engine import Engine
from core.registry import Registry
from core.store.database import Store


@attrs.frozen
class Bundle:
    engine: Engine
    """The trigger engine built on this bundle's registry."""
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
