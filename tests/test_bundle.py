"""The bundle (engine, registry, store) is published by one atomic swap: a reader that reads
`host.bundle` once never sees the engine of one build with the registry of another, nor a
registry whose feature switches disagree with its own plugin list and kinds."""

from __future__ import annotations

import threading
import time

import attrs
import pytest

from core import Host
from core.bundle import Bundle, BundleHolder
from core.plugin.registry import Registry

READERS = 4
TOGGLES = 40


def _inconsistencies(bundle: Bundle, host: Host) -> list[str]:
    """Everything that would betray a half-published bundle, as readable strings."""
    registry: Registry = bundle.registry
    office_on = registry.features.office
    problems = []
    if bundle.engine.registry is not registry:
        problems.append("engine holds another build's registry")
    if bundle.store is not host.store:
        problems.append("bundle holds another store")
    office = next(i for i in registry.plugins if i.name == "office")
    if office.enabled != office_on:
        problems.append(f"office listed enabled={office.enabled} with features.office={office_on}")
    for name in registry.kinds_of("office"):
        registered = registry.kinds[name]
        expected = registered.kind.execute is not None and office_on
        if registered.executable != expected:
            problems.append(f"{name}.executable={registered.executable} with office={office_on}")
    quorum = registry.guard("wait_for_quorum")
    if quorum is None or quorum.enabled != office_on:
        problems.append(f"wait_for_quorum guard {quorum} with office={office_on}")
    return problems


def test_readers_never_see_a_mixed_bundle_while_features_toggle(sqlite_host: Host) -> None:
    host = sqlite_host
    first = host.bundle
    assert first.generation == 0
    assert first.registry.features.office is True
    assert _inconsistencies(first, host) == []

    published: dict[int, Bundle] = {0: first}
    done = threading.Event()
    seen: list[list[tuple[int, Bundle]]] = [[] for _ in range(READERS)]
    failures: list[str] = []

    def reader(index: int) -> None:
        last_generation = -1
        while not done.is_set():
            bundle = host.bundle  # read once, then use only this object
            problems = _inconsistencies(bundle, host)
            if problems:
                failures.append(f"reader {index}, generation {bundle.generation}: {problems}")
            if bundle.generation < last_generation:
                failures.append(
                    f"reader {index} went back from {last_generation} to {bundle.generation}"
                )
            if bundle.generation != last_generation:
                seen[index].append((bundle.generation, bundle))
                last_generation = bundle.generation
            time.sleep(0)  # let the publisher and other readers interleave

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
    for thread in threads:
        thread.start()
    try:
        office = True
        for _ in range(TOGGLES):
            office = not office
            bundle = host.set_features(office=office)
            published[bundle.generation] = bundle
            assert bundle.registry.features.office is office
            assert host.bundle is bundle
    finally:
        done.set()
        for thread in threads:
            thread.join(30)

    assert not any(t.is_alive() for t in threads)
    assert failures == []
    # Every publish got the next generation: 0, 1, 2, ... with no gap and no repeat.
    assert sorted(published) == list(range(TOGGLES + 1))
    # What each reader saw is exactly one of the published bundles, under its own generation.
    for observations in seen:
        for generation, bundle in observations:
            assert bundle is published[generation]
    observed = {generation for observations in seen for generation, _ in observations}
    assert len(observed) > 2, "the readers never overlapped a republish; the race was not run"


def test_generations_strictly_increase_and_the_old_bundle_is_untouched(sqlite_host: Host) -> None:
    before = sqlite_host.bundle

    after_off = sqlite_host.set_features(office=False)
    after_block = sqlite_host.set_plugins(allow=["kanban", "office"], block=["office"])

    assert [before.generation, after_off.generation, after_block.generation] == [0, 1, 2]
    # A dispatch still holding the first bundle keeps a coherent, unchanged view.
    assert before.registry.features.office is True
    assert before.registry.kinds["clear_decisions"].plugin == "office"
    assert after_off.registry.features.office is False
    assert "clear_decisions" not in after_block.registry.kinds
    assert before.registry is not after_off.registry is not after_block.registry
    assert before.engine is not after_off.engine


def test_holder_numbers_generations_itself() -> None:
    """A bundle handed to `publish` with any generation gets the holder's next number."""
    holder = BundleHolder(Bundle(engine=None, registry=None, store=None))  # type: ignore[arg-type]
    stale = Bundle(engine=None, registry=None, store=None, generation=7)  # type: ignore[arg-type]

    first = holder.publish(stale)
    second = holder.publish(stale)

    assert (first.generation, second.generation) == (1, 2)
    assert holder.current() is second
    assert stale.generation == 7  # bundles are frozen: publish made new ones
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        second.generation = 9  # type: ignore[misc]
