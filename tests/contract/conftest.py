"""The contract kit's hosts open the suite's databases: a SQLite file and, when a server is
reachable (LANEWAY_TEST_PG_URL), PostgreSQL (the `db_url` fixture of tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def laneway_db_url(db_url: str) -> str:
    return db_url
