"""Issue 42 item 4 (CLI.md `schedule ...`): a schedule creates one task per slot whichever
hosts run the scheduler (the conditional UPDATE of its last slot decides, the operation id
`schedule:<id>:<slot start>` is recorded), slots missed while nothing ran make one task, not
one per slot; bad `--every` values are one line each. Two real workers over several slots, and
a restart after missed slots: tests/multiprocess/test_schedule_processes.py."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from core.services.schedules import operation_id
from core.store import tables as t
from plugins.testing.logs import captured
from tests.cli.conftest import Laneway
from tests.conftest import open_host

SLOT = 60


@pytest.fixture
def board(laneway: Laneway) -> Laneway:
    laneway.json("workflow", "create", "--template", "simple")
    return laneway


def _titled(lw: Laneway, title: str) -> list[dict[str, object]]:
    return [x for x in lw.json("task", "list") if x["title"] == title]


def test_issue_42_item_4_schedule_add_list_remove(board: Laneway) -> None:
    made = board.json(
        "schedule",
        "add",
        "--workflow",
        "Kanban",
        "--title",
        "nightly check",
        "--description",
        "look at it",
        "--step",
        "Done",
        "--every",
        "86400",
    )
    assert made["every"] == 86400
    assert made["title"] == "nightly check"
    assert made["next_at"].endswith("T00:00:00.000000Z")  # the next slot: midnight UTC
    assert [s["id"] for s in board.json("schedule", "list")] == [made["id"]]
    assert "nightly check" in board.run("schedule", "list").stdout
    assert board.json("schedule", "remove", made["id"]) == {"removed": made["id"]}
    assert board.json("schedule", "list") == []
    assert board.fails("schedule", "remove", made["id"]) == f"laneway: no schedule {made['id']!r}"


@pytest.mark.parametrize(
    ("every", "says"),
    [
        ("0", "must be at least 1 second"),
        ("-5", "must be at least 1 second"),
        ("inf", "must be a finite whole number of seconds"),
        ("nan", "must be a finite whole number of seconds"),
        ("1" + "0" * 30, "must be at most 31622400 seconds (366 days)"),
        ("1e30", "must be at most 31622400 seconds (366 days)"),
        ("2.5", "must be a whole number of seconds"),
        ("soon", "must be a whole number of seconds"),
    ],
)
def test_issue_42_item_4_bad_every_is_one_line(board: Laneway, every: str, says: str) -> None:
    add = ("schedule", "add", "--workflow", "Kanban", "--title", "x")
    line = board.fails(*add, f"--every={every}")
    assert line == f"laneway: --every {every!r}: {says}"
    assert board.json("schedule", "list") == []


def test_issue_42_item_4_bad_workflow_step_title_are_one_line(board: Laneway) -> None:
    add = ("schedule", "add", "--every", "60")
    assert "no workflow 'Nope'" in board.fails(*add, "--workflow", "Nope", "--title", "x")
    assert "has no step 'Nope'" in board.fails(
        *add, "--workflow", "Kanban", "--title", "x", "--step", "Nope"
    )
    assert "--title: must not be empty" in board.fails(*add, "--workflow", "Kanban", "--title", " ")


def test_issue_42_item_4_one_task_per_slot_across_hosts_and_one_for_missed_slots(
    board: Laneway,
) -> None:
    made = board.json(
        "schedule", "add", "--workflow", "Kanban", "--title", "tick", "--every", str(SLOT)
    )
    with open_host(board.url) as host, open_host(board.url) as other:
        first = host.schedules.list()[0].next_at
        # the slot it was added in makes nothing: the first task comes at the next slot
        assert host.schedules.fire_due(now=first - 1) == 0
        assert host.schedules.fire_due(now=first) == 1
        assert other.schedules.fire_due(now=first + 1) == 0
        assert host.schedules.fire_due(now=first + SLOT - 1) == 0
        assert other.schedules.fire_due(now=first + SLOT) == 1
        assert host.schedules.fire_due(now=first + SLOT + 5) == 0
        # nine slots pass with nothing running: the one current slot makes one task
        late = first + 10 * SLOT + 7
        assert other.schedules.fire_due(now=late) == 1
        assert host.schedules.fire_due(now=late + 1) == 0
        with host.store.read() as conn:
            ops = set(
                conn.execute(
                    sa.select(t.applied_operations.c.operation_id).where(
                        t.applied_operations.c.operation_id.startswith("schedule:")
                    )
                ).scalars()
            )
    assert ops == {
        operation_id(made["id"], slot) for slot in (first, first + SLOT, first + 10 * SLOT)
    }
    tasks = _titled(board, "tick")
    assert len(tasks) == 3
    assert all(x["state"] == "TODO" for x in tasks)


def test_issue_42_item_4_the_step_given_and_a_removed_schedule(board: Laneway) -> None:
    made = board.json(
        "schedule",
        "add",
        "--workflow",
        "Kanban",
        "--title",
        "weekly",
        "--step",
        "Done",
        "--every",
        str(SLOT),
    )
    with open_host(board.url) as host:
        first = host.schedules.list()[0].next_at
        assert host.schedules.fire_due(now=first) == 1
        done = host.workflows.step(host.workflows.get("Kanban"), "Done")
        board.json("schedule", "remove", made["id"])
        assert host.schedules.fire_due(now=first + SLOT) == 0
    [task] = _titled(board, "weekly")
    assert task["workflow_step_id"] == done.id


def test_issue_42_item_4_deleting_the_workflow_removes_its_schedules(board: Laneway) -> None:
    board.json("schedule", "add", "--workflow", "Kanban", "--title", "x", "--every", "60")
    board.json("workflow", "delete", "Kanban")
    assert board.json("schedule", "list") == []


def test_issue_42_item_4_a_slot_that_cannot_make_its_task_is_one_error_and_spent(
    board: Laneway,
) -> None:
    made = board.json(
        "schedule", "add", "--workflow", "Kanban", "--title", "lost", "--every", str(SLOT)
    )
    with open_host(board.url) as host:
        first = host.schedules.list()[0].next_at
        with host.store.transaction() as uow:  # its step went away (an edited workflow)
            uow.conn.execute(
                sa.update(t.schedules).where(t.schedules.c.id == made["id"]).values(step_id="gone")
            )
        with captured() as logs:
            assert host.schedules.fire_due(now=first) == 0
            assert host.schedules.fire_due(now=first + 1) == 0  # spent: not one ERROR a pass
        errors = [r for r in logs if r["level"] == "ERROR"]
        assert [(r["message"], r["extra"]["operation_id"]) for r in errors] == [
            ("scheduled task not created", operation_id(made["id"], first))
        ]
        assert host.schedules.list()[0].next_at == first + SLOT
    assert _titled(board, "lost") == []
