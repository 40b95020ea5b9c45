"""Fixtures of the fencing tests (issue 27): the on_enter tests' Office board."""

from __future__ import annotations

import pytest

from tests.on_enter.conftest import Office, build_office


@pytest.fixture
def office(db_url: str) -> Office:
    """An Office board on a fresh database (SQLite file, and PostgreSQL when available)."""
    return build_office(db_url)
