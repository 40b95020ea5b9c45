"""`Bundle.engine` is optional, and says so (house issue 26, item 2: "`Bundle.engine` is typed
non-optional but may be `None`"): a bundle built without an engine answers None, one given a
builder builds its engine once, on first use, and a host's bundle always has one."""

from __future__ import annotations

import threading
from typing import Any

from core import Host
from core.bundle import Bundle
from core.engine import Engine


def test_a_bundle_without_an_engine_answers_none() -> None:
    """Given ``engine=None``, or no builder, there is no engine: None, never a stand-in."""
    given_none = Bundle(engine=None, registry=None, store=None)  # type: ignore[arg-type]
    no_builder = Bundle(registry=None, store=None)  # type: ignore[arg-type]
    assert given_none.engine is None
    assert no_builder.engine is None


def test_a_builder_runs_once_on_first_use_whoever_asks() -> None:
    """The engine is built the first time it is asked for, once, even by racing readers."""
    built: list[Any] = []
    engine = object()

    def build(registry: Any) -> Any:
        built.append(registry)
        return engine

    registry: Any = object()
    bundle = Bundle(registry=registry, store=None, build_engine=build)  # type: ignore[arg-type]
    assert built == []
    seen: list[object] = []
    readers = [threading.Thread(target=lambda: seen.append(bundle.engine)) for _ in range(8)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    assert seen == [engine] * 8
    assert built == [registry]


def test_a_hosts_bundle_has_its_engine(sqlite_url: str) -> None:
    """A host builds every bundle with an engine on the bundle's registry; `host.engine` is
    that engine."""
    with Host.open(sqlite_url) as host:
        engine = host.bundle.engine
        assert isinstance(engine, Engine)
        assert host.engine is engine
        assert engine.registry is host.bundle.registry
