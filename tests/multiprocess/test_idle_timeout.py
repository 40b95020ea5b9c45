"""Issue 27 item 1, a server `idle_session_timeout` shorter than a turn: two workers, a 3 s turn,
a database whose sessions the server ends after 0.4 s idle (`ALTER DATABASE ... SET`, on a
database of the test's own: never the server's settings).

What it shows: the run executes once and ends `finished`, its on_turn_complete moves the task
once, no run is re-queued, failed or `dead`, and both workers live. A connection the server
ended while it sat idle is found so before it is used and replaced: the pooled ones by their
pre-ping, the writer because its socket turned readable (the server's goodbye) while nobody
used it. Fails on the main this branch started from: the worker's writer sat idle through the
turn, the server ended it, and the turn's next transcript write failed on the dead connection, so
the run went back to the queue and ran again; an idle worker logged "database unavailable"
twice a second; and opening the board failed when its migration outlasted the timeout (the
schema lock's connection sat idle meanwhile).

PostgreSQL only: `idle_session_timeout` is a PostgreSQL server setting.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from core.runs import RunRequest
from core.store import tables as t
from tests.conftest import eventually, open_host
from tests.multiprocess.conftest import LANEWAY, child_env, log_records, task_moves
from tests.on_enter.conftest import raw


def test_item1_idle_session_timeout_shorter_than_a_turn(
    idle_timeout_db: str, tmp_path: Path
) -> None:
    """Item 1 / idle_session_timeout 0.4 s, a 3 s turn (it speaks every 0.75 s), two workers:
    1 execution, the run `finished` once, on_turn_complete applied once, no run dead, both
    workers alive, and neither warns of a database it waits for."""
    url = idle_timeout_db
    starts = tmp_path / "starts"
    code = (
        "import os, sys, time, json\n"
        "sys.stdin.read()\n"
        f"open({str(starts)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "for i in range(4):\n"
        "    print(json.dumps({'log': f'working {i}'}), flush=True)\n"
        "    time.sleep(0.75)\n"
    )
    with open_host(_exempt(url)) as setup:
        wf = setup.workflows.create_from_template("simple")
        agent = setup.profiles.add("a", command=[sys.executable, "-c", code]).id
        task = setup.tasks.create(workflow=wf.id, title="t").id
        step = setup.tasks.get(task).workflow_step_id
        review = next(s.id for s in setup.workflows.get(wf.id).steps if s.name == "Review")
    logs = [tmp_path / "w1.log", tmp_path / "w2.log"]
    workers = []
    try:
        for log in logs:
            with open(log, "w") as out:
                workers.append(
                    subprocess.Popen(
                        [LANEWAY, "--log-json", "--db", url, "worker"],
                        cwd=tmp_path,
                        env=child_env(),
                        stdout=subprocess.DEVNULL,
                        stderr=out,
                    )
                )
        # both workers sit idle past the timeout before the run comes
        eventually(lambda: _open_epochs(url) == 2, timeout=30, what="both workers up")
        with open_host(_exempt(url)) as later:
            run = later.runs.enqueue(RunRequest(agent, task, step, "t", coalesce_exempt=True))
        done = eventually(
            lambda: (r := _run(url, run.run_id))["status"] in ("finished", "failed", "dead") and r,
            timeout=60,
            what="the run to end",
            every=0.1,
        )
        alive = [w.poll() is None for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(timeout=30)
    with raw(url) as conn:
        moves, at = task_moves(conn, task)
        statuses = list(conn.execute(sa.select(t.runs.c.status)).scalars())
    executions = len(starts.read_text().split())
    warned = [r["message"] for log in logs for r in log_records(log) if r["level"]["no"] >= 30]
    print(
        f"executions={executions} status={done['status']} moves={moves} runs={statuses} "
        f"warnings={len(warned)}"
    )
    assert executions == 1, [log.read_text()[-2000:] for log in logs]
    assert (done["status"], done["attempts"]) == ("finished", 1)
    assert (moves, at) == (1, review)  # on_turn_complete moved the task to Review, once
    assert statuses == ["finished"]
    assert alive == [True, True]
    assert warned == [], warned  # a healthy database: nothing to wait out, nothing to give up


def _exempt(url: str) -> str:
    """`url` for the test's own hosts, whose sessions the server leaves open: the workers are
    under test, not the setup. A pause of the test's process past the timeout between two of
    its statements (a loaded machine) ended its connection mid-setup and failed the test
    (CI run 41)."""
    return f"{url}?options=-c%20idle_session_timeout%3D0"


def _run(url: str, run_id: str) -> dict[str, object]:
    """The run's row; `{"status": None}` when the server ended this poll's own connection
    before its read (a pause past the timeout on a loaded machine): the poll asks again, as
    `_open_epochs` does."""
    with contextlib.suppress(sa.exc.OperationalError), raw(url) as conn:
        return dict(conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id)).mappings().one())
    return {"status": None}


def _open_epochs(url: str) -> int:
    with contextlib.suppress(sa.exc.OperationalError), raw(url) as conn:
        where = t.host_epochs.c.closed_at.is_(None)
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(t.host_epochs).where(where)
            ).scalar_one()
        )
    return 0
