"""The holder hears of its lock's loss at once even in a process with more than 1024 open
descriptors (issue 27 item 1, "the holder hears of the loss first"): the lock connection's
socket is then numbered past what select() can watch, and a watch built on select() returned
at once, every time, without looking (a busy loop that never slept on the socket).

PostgreSQL only: on SQLite nothing signals, the wait is the poll of the lock file's inode."""

from __future__ import annotations

import os
import resource
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from core.store import liveness
from tests.conftest import PG_URL

pytestmark = pytest.mark.skipif(PG_URL is None, reason="needs LANEWAY_TEST_PG_URL")


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """Open descriptors until the next one is past 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard descriptor limit ({hard}) is below 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held: list[int] = []
    while not held or held[-1] < 1030:
        held.append(os.open(os.devnull, os.O_RDONLY))
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_lock_watch_past_fd_1024(pg_database: str | None, many_descriptors: None) -> None:
    """With the lock connection's socket numbered past 1024: a wait with the lock held lasts
    its timeout (it sleeps on the socket), and a wait while the server ends the lock
    connection returns as soon as the server says so."""
    assert pg_database is not None
    engine = sa.create_engine(pg_database)
    lock = liveness.EpochLock.take(engine.url, engine, f"fdtest-{uuid.uuid4().hex}")
    try:
        assert lock._connection is not None
        pid = lock._connection.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        fd = lock._socket()
        assert fd is not None
        assert fd >= 1024
        began = time.monotonic()
        lock.wait_signal(0.4)
        assert time.monotonic() - began >= 0.35  # it waited on the socket
        assert lock.holds()
        with engine.connect() as other:
            other.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        began = time.monotonic()
        lock.wait_signal(120.0)
        assert time.monotonic() - began < 60  # the server's word woke it, not the 120 s
        assert not lock.holds()
    finally:
        lock.release()
        engine.dispose()
