"""The bundle: engine, registry and store, published together by one atomic swap.

Readers call `BundleHolder.current()` once per operation and use that bundle throughout, so a
dispatch never sees the registry of one build with the engine of another. The layers below the
engine (the kernel's) see a bundle only as `core.kernel.Published`: its registry and store.
Publishing replaces the reference under a lock; CPython's reference assignment is atomic, so
readers take no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import attrs

from core.plugin.registry import Registry
from core.store.database import Store

if TYPE_CHECKING:
    from core.engine import Engine


class _Unbuilt:
    def __repr__(self) -> str:
        return "<built when first asked for>"


UNBUILT: Final = _Unbuilt()
"""A bundle's engine not built yet (`Bundle.engine`); None is a bundle without an engine."""


@attrs.frozen
class Bundle:
    """A registry, its store, and the trigger engine built on that registry.

    The engine is built the first time it is asked for (`engine`), by `build_engine`: a
    command that evaluates no trigger (a manual move, whose arrival walks its entry sequence
    below the engine) does not import it. Built once per bundle; a bundle given an `engine`
    uses that one, and one given `engine=None` has none (nor does one without
    `build_engine`)."""

    _engine: Engine | _Unbuilt | None = attrs.field(alias="engine", default=UNBUILT, eq=False)
    registry: Registry = attrs.field(kw_only=True)
    store: Store = attrs.field(kw_only=True)
    generation: int = attrs.field(default=0, kw_only=True)
    build_engine: Callable[[Registry], Engine] | None = attrs.field(
        default=None, kw_only=True, eq=False, repr=False
    )
    """Builds the engine on the bundle's registry, when `engine` is first asked for."""
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, eq=False, repr=False)

    @property
    def engine(self) -> Engine | None:
        """The trigger engine built on this bundle's registry; None for a bundle without one
        (given ``engine=None``, or no `build_engine`). A host's bundles always have one."""
        engine = self._engine
        if isinstance(engine, _Unbuilt):
            with self._lock:
                engine = self._engine
                if isinstance(engine, _Unbuilt):
                    build = self.build_engine
                    engine = build(self.registry) if build is not None else None
                    object.__setattr__(self, "_engine", engine)  # frozen: set once, here
        return engine


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
