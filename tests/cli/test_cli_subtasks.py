"""Issue 24 item 2, CLI.md `task create ... [--parent P]` (task with `parent_id`,
`blocked_by`): a parent gets on_children_completed at its step once every non-archived child
has reached a terminal step, once per completed set (operation id
`children_completed:<parent id>:<digest of the set>`), with each child's id, state and last
summary line; the Office Default template's Work step queues the runner's run for it, the
children's summaries in its prompt."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from core.store import tables as t
from tests.cli.conftest import Laneway
from tests.conftest import open_host


def office_board(laneway: Laneway) -> str:
    """An Office Default workflow whose Work step has a runner seat (profile `worker`)."""
    wf = laneway.json("workflow", "create", "--template", "office-default")
    laneway.json("profile", "add", "worker", "--command", "agent")
    laneway.json(
        "participant", "add", "--step", "Work", "--role", "runner", "--profile", "worker",
        "--workflow", wf["id"],
    )  # fmt: skip
    return str(wf["id"])


def runs_of(laneway: Laneway, task: str, reason: str) -> list[dict[str, Any]]:
    return [r for r in laneway.json("runs", "list", "--task", task) if r["reason"] == reason]


def applied(url: str, prefix: str) -> list[str]:
    with open_host(url) as host, host.store.read() as conn:
        return [
            str(op)
            for op in conn.execute(
                sa.select(t.applied_operations.c.operation_id).where(
                    t.applied_operations.c.operation_id.startswith(prefix),
                    t.applied_operations.c.state == "applied",
                )
            ).scalars()
        ]


def test_parent_gets_children_completed_once_per_completed_set(laneway: Laneway) -> None:
    wf = office_board(laneway)
    parent = laneway.json("task", "create", "--workflow", wf, "--title", "epic")
    laneway.json("task", "move", parent["id"], "Work")
    first = laneway.json(
        "task", "create", "--workflow", wf, "--title", "one", "--parent", parent["id"]
    )
    assert first["parent_id"] == parent["id"]
    assert first["blocked_by"] == []
    assert parent["parent_id"] is None
    second = laneway.json(
        "task", "create", "--workflow", wf, "--title", "two", "--parent", parent["id"]
    )
    before = len(runs_of(laneway, parent["id"], "children_completed"))

    laneway.json("task", "move", first["id"], "Done")
    assert len(runs_of(laneway, parent["id"], "children_completed")) == before  # one left
    laneway.json("task", "move", second["id"], "Done")
    made = runs_of(laneway, parent["id"], "children_completed")
    assert len(made) == before + 1
    run = made[-1]
    assert run["workflow_step_id"] == laneway.json("task", "show", parent["id"])["workflow_step_id"]
    children = run["payload"]["children"]
    assert {(c["task_id"], c["state"]) for c in children} == {
        (first["id"], "COMPLETED"),
        (second["id"], "COMPLETED"),
    }
    assert "All subtasks of this task are done" in run["payload"]["message"]
    assert applied(laneway.url, f"children_completed:{parent['id']}:")

    # the same set completing again (a child reopened and finished) fires nothing more
    laneway.json("task", "move", second["id"], "Work")
    laneway.json("task", "move", second["id"], "Done")
    assert len(runs_of(laneway, parent["id"], "children_completed")) == before + 1

    # a new child makes a new set, which fires again when it completes
    third = laneway.json(
        "task", "create", "--workflow", wf, "--title", "three", "--parent", parent["id"]
    )
    laneway.json("task", "move", third["id"], "Done")
    # the first run is still queued (no worker runs here): the second request joins it
    made = runs_of(laneway, parent["id"], "children_completed")
    assert sum(r["coalesced_count"] for r in made) == before + 2
    assert len(applied(laneway.url, f"children_completed:{parent['id']}:")) == 2


def test_archiving_the_last_unfinished_child_completes_the_set(laneway: Laneway) -> None:
    wf = office_board(laneway)
    parent = laneway.json("task", "create", "--workflow", wf, "--title", "epic")
    laneway.json("task", "move", parent["id"], "Work")
    done = laneway.json(
        "task", "create", "--workflow", wf, "--title", "a", "--parent", parent["id"]
    )
    dropped = laneway.json(
        "task", "create", "--workflow", wf, "--title", "b", "--parent", parent["id"]
    )
    laneway.json("task", "move", done["id"], "Done")
    assert runs_of(laneway, parent["id"], "children_completed") == []
    laneway.json("task", "archive", dropped["id"])
    (run,) = runs_of(laneway, parent["id"], "children_completed")
    assert [c["task_id"] for c in run["payload"]["children"]] == [done["id"]]


def test_parent_must_exist_and_deleting_it_frees_the_children(laneway: Laneway) -> None:
    wf = office_board(laneway)
    assert "nope" in laneway.fails(
        "task", "create", "--workflow", wf, "--title", "x", "--parent", "nope"
    )
    parent = laneway.json("task", "create", "--workflow", wf, "--title", "epic")
    child = laneway.json(
        "task", "create", "--workflow", wf, "--title", "c", "--parent", parent["id"]
    )
    laneway.json("task", "delete", parent["id"])
    assert laneway.json("task", "show", child["id"])["parent_id"] is None
    laneway.json("task", "move", child["id"], "Done")  # no parent: nothing to fire, no error
