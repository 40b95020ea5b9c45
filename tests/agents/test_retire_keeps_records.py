"""A worktree's retirement (archive, the terminal step) runs the workflow's cleanup and git's
work, which can take minutes; what another process records on the task meanwhile (a turn's
push, a merge, a pull request) stays: the retirement marks `removed_at` on the record as it
stands when it ends, not on the one it read before its cleanup."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.host import Host
from core.services.worktrees import retire
from core.store import tables as t
from tests.agents.changes_kit import board_with_repo, person_repo, task_with_work

pytestmark = pytest.mark.slow  # git and a cleanup command: the subprocess tier

WAIT_S = 60.0


def test_a_record_written_during_a_retirements_cleanup_is_kept(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEWAY_WORKTREES", str(tmp_path / "wt"))
    wf = board_with_repo(host, tmp_path, person_repo(tmp_path))
    started, go = tmp_path / "cleanup-started", tmp_path / "go"
    host.workflows.set_commands(
        wf,
        cleanup=f"touch {started}; i=0; while [ ! -f {go} ] && [ $i -lt 600 ]; "
        "do sleep 0.1; i=$((i+1)); done",
    )
    task, worktree = task_with_work(host, wf, {"feature.txt": "one\n"})
    retiring = threading.Thread(target=retire, args=(host.store, host.tasks.get(task), "done"))
    retiring.start()
    try:
        for _ in range(int(WAIT_S / 0.05)):
            if started.exists():
                break
            threading.Event().wait(0.05)
        assert started.exists(), "the cleanup never started"
        # another process records a pull request on the task, compare-and-set on the record
        with host.store.transaction() as uow:
            raw = uow.conn.execute(
                sa.select(t.tasks.c.workspace).where(t.tasks.c.id == task)
            ).scalar_one()
            pull = {"forge": "github", "number": 7, "state": "open"}
            done = uow.conn.execute(
                sa.update(t.tasks)
                .where(t.tasks.c.id == task, t.tasks.c.workspace == raw)
                .values(workspace=json.dumps({**json.loads(raw), "pull_request": pull}))
            )
            assert done.rowcount == 1
    finally:
        go.touch()
        retiring.join(WAIT_S)
    assert not retiring.is_alive()
    assert not worktree.exists()
    record = host.tasks.get(task).workspace
    assert record is not None
    assert record["pull_request"] == {"forge": "github", "number": 7, "state": "open"}
    assert record["removed_at"]
