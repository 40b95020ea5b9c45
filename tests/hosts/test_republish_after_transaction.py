"""No bundle is built inside an open transaction or read (house issue item 3).

A host that sees, at a BEGIN, that another process switched the board's features notes that a
new bundle is due and publishes it once that transaction or read has closed; the operation
after it acts with the new bundle, exactly as before.
"""

from __future__ import annotations

from typing import Any

import pytest

from core import Host
from tests.conftest import open_host


def test_the_bundle_is_built_after_the_transaction_that_saw_the_switch(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_host(db_url) as first, open_host(db_url) as second:
        assert first.features.office
        builds: list[bool] = []
        original = Host._build_bundle

        def recording(host: Host) -> Any:
            if host is first:
                builds.append(host.store.in_transaction)
            return original(host)

        monkeypatch.setattr(Host, "_build_bundle", recording)
        before = first.bundle.generation
        second.set_features(office=False)

        with first.store.transaction():
            # the BEGIN saw the switch: the features follow, the bundle waits for the end
            assert not first.features.office
            assert builds == []
        assert builds == [False]
        assert first.bundle.generation > before
        assert not first.bundle.registry.features.office


def test_a_read_that_saw_the_switch_publishes_after_it_closes(db_url: str) -> None:
    with open_host(db_url) as first, open_host(db_url) as second:
        before = first.bundle.generation
        second.set_features(office=False)
        with first.store.read():
            assert first.bundle.generation == before
        assert first.bundle.generation > before
        assert not first.bundle.registry.features.office
