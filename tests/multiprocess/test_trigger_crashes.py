"""Issue 24 crash tests: `kill -9` (a fault point's `os._exit`) between a trigger's cause and
its dispatch, then recovery (`laneway recover`, or any worker's or serve's scheduler pass):
the trigger fires exactly once.

- after a child's arrival at Done committed (`transition.after_commit`), before the parent's
  on_children_completed was delivered: the outbox row written with the arrival is delivered;
- after the blocked task's on_blocker_resolved was delivered (its operation applied, the run
  queued), before the outbox row was removed (`outbox.after_deliver`): recovery finds the
  operation applied and only removes the row.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from core.faults import EXIT_STATUS
from core.store import tables as t
from tests.conftest import open_host
from tests.multiprocess.conftest import Board

pytestmark = pytest.mark.slow


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def _outbox(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return [str(r) for r in conn.execute(sa.select(t.trigger_outbox.c.trigger)).scalars()]


def _asked(engine: sa.Engine, task: str, reason: str) -> int:
    """How many times a trigger asked for the task's run (a queued run joined counts each)."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.coalesce(sa.func.sum(t.runs.c.coalesced_count), 0)).where(
                    t.runs.c.task_id == task, t.runs.c.reason == reason
                )
            ).scalar_one()
        )


def test_a_crash_between_cause_and_dispatch_fires_once_after_recovery(board: Board) -> None:
    with open_host(board.url) as host:
        wf = host.workflows.create_from_template("office-default")
        host.profiles.add("worker", command=["agent"])
        host.participants.add(step="Work", role="runner", profile="worker", workflow=wf.id)
        parent = host.tasks.move(host.tasks.create(workflow=wf.id, title="epic").id, "Work").id
        child = host.tasks.create(workflow=wf.id, title="c", parent=parent).id
        waiting = host.tasks.move(host.tasks.create(workflow=wf.id, title="w").id, "Work").id
        blocker = host.tasks.create(workflow=wf.id, title="b").id
        host.blockers.block(waiting, blocker)
    engine = _engine(board.url)

    # 1. the child's arrival at Done commits; the process dies before delivering
    died = board.run(
        "task", "move", child, "Done", env={"LANEWAY_FAULT": "transition.after_commit"}
    )
    assert died.returncode == EXIT_STATUS, died.stderr
    assert _outbox(engine) == ["on_children_completed"]
    assert _asked(engine, parent, "children_completed") == 0
    assert board.json("recover")["triggers_delivered"] == 1
    assert _outbox(engine) == []
    assert _asked(engine, parent, "children_completed") == 1

    # 2. the blocker's trigger is delivered; the process dies before removing the row
    died = board.run("task", "move", blocker, "Done", env={"LANEWAY_FAULT": "outbox.after_deliver"})
    assert died.returncode == EXIT_STATUS, died.stderr
    assert _asked(engine, waiting, "blockers_resolved") == 1
    assert _outbox(engine) == ["on_blocker_resolved"]
    # its operation is applied: recovery delivers nothing again, only removes the row
    assert board.json("recover")["triggers_delivered"] == 0
    assert _outbox(engine) == []
    assert _asked(engine, waiting, "blockers_resolved") == 1
    assert _asked(engine, parent, "children_completed") == 1
    engine.dispose()


def test_a_comment_whose_process_dies_before_on_comment_fires_it_once_after_recovery(
    board: Board,
) -> None:
    """A comment's on_comment goes in the outbox with the comment: `kill -9` after the
    comment's COMMIT and before its delivery (`comment.after_commit`) loses nothing; recovery
    delivers it once, and a comment whose process lives leaves no outbox row behind."""
    with open_host(board.url) as host:
        wf = host.workflows.create_from_template("office-default")
        host.profiles.add("worker", command=["agent"])
        host.participants.add(step="Work", role="runner", profile="worker", workflow=wf.id)
        task = host.tasks.move(host.tasks.create(workflow=wf.id, title="t").id, "Work").id
    engine = _engine(board.url)
    asked = _asked(engine, task, "task_comment")

    died = board.run(
        "task", "comment", task, "please look again", env={"LANEWAY_FAULT": "comment.after_commit"}
    )
    assert died.returncode == EXIT_STATUS, died.stderr
    assert [c["body"] for c in board.json("task", "comments", task)] == ["please look again"]
    assert _outbox(engine) == ["on_comment"]
    assert _asked(engine, task, "task_comment") == asked
    assert board.json("recover")["triggers_delivered"] == 1
    assert _outbox(engine) == []
    assert _asked(engine, task, "task_comment") == asked + 1
    assert board.json("recover")["triggers_delivered"] == 0
    assert _asked(engine, task, "task_comment") == asked + 1

    said = board.run("task", "comment", task, "and this")
    assert said.returncode == 0, said.stderr
    assert _outbox(engine) == []
    assert _asked(engine, task, "task_comment") == asked + 2
    engine.dispose()
