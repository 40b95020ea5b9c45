"""Issue 38 item 10: `task delete` while its agent is in a turn (exec and ACP, both databases,
a real `laneway worker --once`) ends the run cancelled: the agent is stopped, the worker says
nothing at ERROR, prints no traceback and does not call the run failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.store import tables as t
from tests.agents.conftest import (
    enqueue,
    inspect_host,
    laneway_script,
    plain_workflow,
    python_agent,
    script_env,
)
from tests.agents.test_acp_worker import FAKE, Board
from tests.conftest import eventually, open_host

pytestmark = pytest.mark.slow

CHATTY = python_agent(
    "import sys, time\nsys.stdin.read()\n"
    "for i in range(600):\n    print(f'working {i}', flush=True)\n    time.sleep(0.05)\n"
)


def _worker(url: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [laneway_script(), "--log-json", "--db", url, "worker", "--once"],
        cwd=cwd,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _said(url: str, session: str) -> bool:
    with inspect_host(url) as host, host.store.read() as conn:
        items = t.transcript_items
        return bool(
            conn.execute(
                sa.select(sa.func.count()).where(
                    items.c.session_id == session, items.c.kind.in_(("output", "message"))
                )
            ).scalar()
        )


def _delete_and_finish(url: str, task: str, session: str, proc: subprocess.Popen[str]) -> str:
    eventually(lambda: _said(url, session), timeout=60, what="the agent to say something")
    assert [s for s, _why in _run_status(url)] == ["claimed"]  # its turn goes on
    with open_host(url) as host:
        host.tasks.delete(task)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    said = out + err
    assert "ERROR" not in said, said
    assert "Traceback" not in said, said
    assert "failed run" not in said, said
    assert "run could not be executed" not in said, said
    return said


def _run_status(url: str) -> list[tuple[str, str | None]]:
    with inspect_host(url) as host, host.store.read() as conn:
        return [
            (r.status, r.cancel_reason)
            for r in conn.execute(sa.select(t.runs.c.status, t.runs.c.cancel_reason))
        ]


def test_issue_38_item_10_deleting_a_task_during_an_exec_turn_ends_it_cancelled(
    db_url: str, tmp_path: Path
) -> None:
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        agent = host.profiles.add("chatty", command=CHATTY).id
        task = host.tasks.create(workflow=wf, title="doomed").id
        session = host.sessions.start(task, profile="chatty", external=False).id
        enqueue(host, agent, task)
    proc = _worker(db_url, tmp_path)
    said = _delete_and_finish(db_url, task, session, proc)
    assert _run_status(db_url) == [("cancelled", "task_deleted")], said


def test_issue_38_item_10_deleting_a_task_during_an_acp_turn_ends_it_cancelled(
    db_url: str, tmp_path: Path
) -> None:
    # a message, then a pause past the client's chunk coalescing (so it is kept as it comes)
    steps = [{"message": "working"}, {"sleep": 0.5}]
    board = Board(db_url, tmp_path, {"turns": [steps * 120, []]}, command=(sys.executable, FAKE))
    with open_host(db_url, read_only=True) as host:
        (session,) = host.sessions.list(task=board.task_id)
    proc = _worker(db_url, tmp_path)
    said = _delete_and_finish(db_url, board.task_id, session.id, proc)
    assert ("cancelled", "task_deleted") in _run_status(db_url), said
