"""Issue 24 item 4, CLI.md: every `serve` runs the trigger scheduler too (not only workers):
with `laneway serve` the only process on the board, a task at a step with
`heartbeat_seconds: 1` gets on_heartbeat (its runner's run queued)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.store import tables as t
from tests.conftest import open_host
from tests.serve.conftest import start_serve
from tests.triggers.boards import heartbeat_board

pytestmark = pytest.mark.slow


def test_serve_fires_heartbeats(sqlite_url: str, tmp_path: Path) -> None:
    with open_host(sqlite_url, upgrade=True) as host:
        _wf, [task] = heartbeat_board(host, 1)
    engine = sa.create_engine(sqlite_url)

    def beats() -> int:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count()).where(
                        t.applied_operations.c.operation_id.startswith(f"heartbeat:{task.id}:")
                    )
                ).scalar_one()
            )

    served = start_serve(sqlite_url, tmp_path)
    try:
        deadline = time.monotonic() + 30
        while beats() == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert beats() >= 1
    finally:
        served.stop(signal.SIGTERM)
    with open_host(sqlite_url) as host:
        assert any(r.reason == "heartbeat" for r in host.runs.list(task=task.id))
    engine.dispose()
