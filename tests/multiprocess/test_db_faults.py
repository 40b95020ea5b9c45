"""Issue 27 item 2: a worker survives a PostgreSQL restart (`pg_ctl restart -m immediate`)
mid-turn, on a throwaway cluster of the test's own (never the suite's shared server).

What it shows: the worker does not exit (main: `database error: the connection is lost`, exit
1); its lock went with the server, so it stopped the agent of the run it had claimed and gave
the run up, and once the server is back it takes a new epoch, finds the old one dead, re-queues
the run and runs it again to `finished` - the turn is not lost and the run is never failed
(main: the finished turn was recorded `failed` and the task sat at its step). A run queued after
the restart is claimed and finished too. Without a PostgreSQL installation the test is skipped
with a reason, except under CI (`CI` set), where it fails.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from core.runs import RunRequest
from core.store import tables as t
from tests.conftest import eventually, open_host
from tests.multiprocess.conftest import LANEWAY, child_env
from tests.on_enter.conftest import raw

WAIT_S = 60.0


@attrs.frozen
class Cluster:
    url: str
    data: str
    bin: str

    def pg_ctl(self, *args: str) -> None:
        # the server it starts must not hold a pipe of ours: its output goes to the log
        subprocess.run(
            _as_owner([f"{self.bin}/pg_ctl", "-D", self.data, "-l", f"{self.data}/log", *args]),
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            timeout=60,
        )


def _as_owner(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


FIRST_PORT = 24339
"""Where throwaway clusters' ports start: below the kernel's ephemeral range
(`ip_local_port_range`, 32768-60999 by default), which it hands out as the local ports of
connections. A port in that range can be a connection's for a whole run (a test worker's pooled
connection), and then a server cannot bind it: CI's partition cluster, started on 54360, came up
on its other address only and refused 127.0.0.1."""


def _free_port(start: int = FIRST_PORT) -> int:
    """A port below the ephemeral range that nothing holds on 127.0.0.1 now."""
    for port in range(start, start + 100):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # listened on, or some socket's own
            return port
    raise RuntimeError("no free port for a throwaway PostgreSQL cluster")


@pytest.fixture
def restartable_pg() -> Iterator[Cluster]:
    """A PostgreSQL cluster of this test's own, which it may restart."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed (.ci/start-postgres installs it)")
        pytest.skip("PostgreSQL is not installed: no cluster to restart")
    bin_dir = os.path.dirname(found[-1])
    data = tempfile.mkdtemp(prefix="laneway-pg-restart.")
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
    port = _free_port()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {data} -c fsync=off"
    cluster = Cluster(f"postgresql://postgres@127.0.0.1:{port}/postgres", data, bin_dir)
    subprocess.run(
        _as_owner([f"{bin_dir}/initdb", "-D", data, "-A", "trust", "-U", "postgres",
                   "--no-locale", "-E", "UTF8"]),
        check=True, capture_output=True, cwd="/", timeout=120,
    )  # fmt: skip
    cluster.pg_ctl("-w", "-t", "60", "-o", options, "start")
    try:
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            cluster.pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(data, ignore_errors=True)


def _until(probe: Any, what: str, timeout: float = WAIT_S) -> Any:
    return eventually(probe, timeout=timeout, what=what, every=0.1)


def _run(url: str, run_id: str) -> dict[str, Any] | None:
    try:
        with raw(url) as conn:
            row = conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id)).mappings().first()
            return dict(row) if row is not None else None
    except sa.exc.OperationalError:
        return None  # the server is still coming back


def test_item2_a_worker_survives_a_postgres_restart_mid_turn(
    restartable_pg: Cluster, tmp_path: Path
) -> None:
    """Item 2: `pg_ctl restart -m immediate` while the worker's agent works: the worker lives,
    the run ends `finished` (executed again: 2 executions, 0 lost turns, 0 failed runs), and a
    run queued after the restart is finished too."""
    url = restartable_pg.url
    starts = tmp_path / "starts"
    code = (
        "import os, sys, time\n"
        "sys.stdin.read()\n"
        f"p = {str(starts)!r}\n"
        "first = not os.path.exists(p)\n"
        "open(p, 'a').write(os.environ['LANEWAY_RUN_ID'] + '\\n')\n"
        "time.sleep(30 if first else 0)\n"
    )
    with open_host(url) as setup:
        wf = setup.workflows.create_from_template("simple")
        agent = setup.profiles.add("a", command=[sys.executable, "-c", code]).id
        task = setup.tasks.create(workflow=wf.id, title="t").id
        step = setup.tasks.get(task).workflow_step_id
        first_run = setup.runs.enqueue(
            RunRequest(agent, task, step, "t", coalesce_exempt=True)
        ).run_id
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        w = subprocess.Popen(
            [LANEWAY, "--db", url, "worker"],
            cwd=tmp_path,
            env=child_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _until(lambda: starts.exists() and starts.read_text().split(), "the agent to start")
        restartable_pg.pg_ctl("-m", "immediate", "-w", "-t", "60", "restart")
        done = _until(
            lambda: (r := _run(url, first_run)) is not None and r["status"] == "finished" and r,
            "the run to be finished after the restart",
        )
        assert w.poll() is None, log.read_text()
        with open_host(url) as later:
            now_at = later.tasks.get(task).workflow_step_id  # the finished turn moved it on
            second_run = later.runs.enqueue(
                RunRequest(agent, task, now_at, "again", coalesce_exempt=True)
            ).run_id
        _until(
            lambda: (r := _run(url, second_run)) is not None and r["status"] == "finished",
            "a run queued after the restart to be finished",
            timeout=30,
        )
        assert w.poll() is None, log.read_text()
    finally:
        if os.environ.get("LANEWAY_DEBUG_FAULTS"):
            print(log.read_text())
        if w.poll() is None:
            w.send_signal(signal.SIGKILL)
            w.wait(timeout=30)
    executions = starts.read_text().split()
    with raw(url) as conn:
        failed = conn.execute(
            sa.select(sa.func.count()).select_from(t.runs).where(t.runs.c.status == "failed")
        ).scalar()
    print(f"executions={executions.count(first_run)} failed_runs={failed}")
    assert executions.count(first_run) == 2
    assert failed == 0
    assert done["attempts"] >= 1
    text = log.read_text()
    assert "Traceback" not in text
    assert "database unavailable" in text or "liveness lock lost" in text
