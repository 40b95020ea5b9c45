"""Issue 39 item 8 (first part): serve's LISTEN connection exempts itself from the server's
`idle_session_timeout`. It sits idle between notifications by design; before, a database whose
sessions end after 300 ms idle had serve warn `LISTEN connection lost` every few seconds (20
WARNINGs in 44 s) and fall back to polling meanwhile.

PostgreSQL only: `idle_session_timeout` and LISTEN are PostgreSQL's."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import IDLE_SESSION_TIMEOUT, eventually
from tests.serve.conftest import laneway, start_serve

pytestmark = pytest.mark.slow

LISTENERS = sa.text(
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
    "AND query LIKE '%LISTEN%' AND pid <> pg_backend_pid()"
)


def test_issue_39_item_8_serve_listen_connection_outlives_idle_session_timeout(
    idle_timeout_db: str, tmp_path: Path
) -> None:
    """idle_session_timeout 400 ms, serve up 6 s (15 x the timeout): one LISTEN backend all
    along (the same pid at the start and at the end), and no `LISTEN connection lost`."""
    assert IDLE_SESSION_TIMEOUT == "400ms"
    laneway(idle_timeout_db, "init")
    served = start_serve(idle_timeout_db, tmp_path)
    engine = sa.create_engine(  # a connection per look: the server ends idle ones
        idle_timeout_db.replace("postgresql://", "postgresql+psycopg://"), poolclass=sa.NullPool
    )
    try:

        def listeners() -> list[int]:
            with engine.connect() as conn:
                return list(conn.execute(LISTENERS).scalars())

        first = eventually(listeners, timeout=30, what="serve's LISTEN connection")
        time.sleep(6.0)  # a window the timeout would end the connection in 15 times over
        last = listeners()
        assert served.proc.poll() is None, served.stderr[-3000:]
    finally:
        served.stop(signal.SIGTERM)
        engine.dispose()
    lost = served.stderr.count("LISTEN connection lost")
    print(f"listen_backends_first={first} last={last} lost_warnings={lost}")
    assert lost == 0, served.stderr[-3000:]
    assert last == first
