"""Fixtures for the on_agent_error dispatch tests: `world`, a host carrying the `aeprobe` test
plugin on a fresh database (a SQLite file, and PostgreSQL when LANEWAY_TEST_PG_URL is set),
with tiny transient-retry delays so the retry routes run in milliseconds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_error.helpers import FAST_RETRIES, Probe, World, open_world_host


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    files = tmp_path / "files"
    files.mkdir()
    found = Probe()
    with open_world_host(db_url, found) as host:
        host.runtime.retry_delays = FAST_RETRIES
        yield World(host, found, files, db_url)
