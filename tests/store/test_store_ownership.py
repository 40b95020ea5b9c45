"""One host process owns a database: an OS file lock beside a SQLite file, a session-level
advisory lock on PostgreSQL. A second process is refused at once, with the owner's pid; the
lock is free again when the owner closes or dies. Each open mints a fresh random epoch."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import sqlalchemy as sa

from core import Host
from core.store import tables as t
from core.store.dialect import OwnershipError
from tests.conftest import open_host

pytestmark = pytest.mark.slow

# A second laneway process: opens a host on argv[1] and reports how that went on stdout.
SECOND_PROCESS = textwrap.dedent(
    """
    import sys, time
    from core import Features, Host
    from plugins.manager import PluginSelection

    selection = PluginSelection(allow=frozenset({"kanban", "office"}))
    started = time.monotonic()
    try:
        host = Host.open(sys.argv[1], plugins=selection)
    except Exception as exc:
        print(f"refused {time.monotonic() - started:.2f} {type(exc).__name__}: {exc}")
        sys.exit(3)
    print(f"opened {host.epoch}", flush=True)
    if sys.argv[2:] == ["hold"]:
        sys.stdin.readline()  # hold the lock until the test kills us
    host.close()
    """
)
REFUSED = re.compile(r"^refused (?P<seconds>[\d.]+) OwnershipError: (?P<message>.*)$")


def _second_process(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SECOND_PROCESS, url],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("LANEWAY_PLUGINS_")},
    )


def test_second_process_is_refused_at_once_naming_the_owner_pid(db_url: str) -> None:
    with open_host(db_url):
        refused = _second_process(db_url)

        assert refused.returncode == 3, refused.stderr
        found = REFUSED.match(refused.stdout.strip())
        assert found, refused.stdout
        assert found["message"] == (
            f"database is owned by another laneway process (pid {os.getpid()})"
        )
        # "At once": well under the SQLite busy timeout (10 s); no waiting for the owner.
        assert float(found["seconds"]) < 5


def test_lock_is_free_again_after_close(db_url: str) -> None:
    with open_host(db_url):
        assert _second_process(db_url).returncode == 3

    reopened = _second_process(db_url)

    assert reopened.returncode == 0, reopened.stdout + reopened.stderr
    assert reopened.stdout.startswith("opened ")


def test_lock_dies_with_its_process(db_url: str) -> None:
    """An owner that is killed (no close, no cleanup) does not strand the database."""
    owner = subprocess.Popen(
        [sys.executable, "-c", SECOND_PROCESS, db_url, "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.startswith("opened "), line + (owner.stderr.read() if owner.stderr else "")
        with pytest.raises(OwnershipError, match=rf"\(pid {owner.pid}\)$"):
            open_host(db_url)
    finally:
        owner.kill()
        owner.wait(10)

    # The OS drops the file lock at once; PostgreSQL drops the advisory lock when it notices
    # the dead client's connection, which can take a moment.
    deadline = time.monotonic() + 10
    while True:
        try:
            host = open_host(db_url)
            break
        except OwnershipError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    host.close()


def test_same_process_second_open_is_refused_too(sqlite_url: str) -> None:
    with open_host(sqlite_url), pytest.raises(OwnershipError, match=f"pid {os.getpid()}"):
        open_host(sqlite_url)


def test_failed_open_releases_the_lock(sqlite_url: str) -> None:
    """A host whose open fails part-way (here: schema refused) leaves no lock behind."""
    from core.errors import NotInitialised

    with pytest.raises(NotInitialised):
        Host.open(sqlite_url, upgrade=False)

    with open_host(sqlite_url) as host:
        assert host.writable


# -- epochs --------------------------------------------------------------------------------------


def _epoch_rows(url: str) -> list[sa.Row[tuple[str, int, str, str, str | None]]]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            he = t.host_epochs
            return list(
                conn.execute(
                    sa.select(
                        he.c.epoch, he.c.pid, he.c.hostname, he.c.opened_at, he.c.closed_at
                    ).order_by(he.c.opened_at)
                )
            )
    finally:
        engine.dispose()


def test_each_open_mints_a_fresh_random_epoch_recorded_and_closed(db_url: str) -> None:
    epochs = []
    for _ in range(3):  # three opens by one pid, well inside one second
        with open_host(db_url) as host:
            epochs.append(host.epoch)
            open_rows = {r.epoch: r for r in _epoch_rows(db_url)}
            assert open_rows[host.epoch].closed_at is None

    assert len(set(epochs)) == 3
    pid, now = os.getpid(), int(time.time())
    for epoch in epochs:
        assert epoch is not None
        assert re.fullmatch(r"[0-9a-f]{32}", epoch)
        # Neither a pid nor a clock reading, in any spelling.
        assert epoch not in {str(pid), f"{pid:x}", str(now), f"{now:x}"}
    rows = _epoch_rows(db_url)
    assert [r.epoch for r in rows] == epochs
    assert all(r.pid == pid for r in rows)
    assert all(r.hostname == socket.gethostname() for r in rows)
    assert all(r.closed_at is not None and r.closed_at >= r.opened_at for r in rows)


def test_read_only_host_takes_no_lock_and_mints_no_epoch(db_url: str) -> None:
    with open_host(db_url) as writer:
        with open_host(db_url, read_only=True) as reader:
            assert reader.epoch is None
            assert not reader.writable
        assert [r.epoch for r in _epoch_rows(db_url)] == [writer.epoch]
