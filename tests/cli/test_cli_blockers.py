"""Issue 24 item 3, CLI.md `task block T --by B` / `task unblock T --by B` (task): B blocks
T; T gets on_blocker_resolved at its step when its last blocker reaches a terminal step, once
per resolution (operation id `blockers_resolved:<task id>:<the resolving arrival>`), payload
`resolved_blocker_ids`; the Office Default template's Work queues the runner's run for it. A
cycle is refused with one line."""

from __future__ import annotations

from tests.cli.conftest import Laneway
from tests.cli.test_cli_subtasks import applied, office_board, runs_of


def test_last_blocker_done_fires_on_blocker_resolved_once(laneway: Laneway) -> None:
    wf = office_board(laneway)
    blocked = laneway.json("task", "create", "--workflow", wf, "--title", "waits")
    laneway.json("task", "move", blocked["id"], "Work")
    one = laneway.json("task", "create", "--workflow", wf, "--title", "b1")
    two = laneway.json("task", "create", "--workflow", wf, "--title", "b2")
    assert laneway.json("task", "block", blocked["id"], "--by", one["id"])["blocked_by"] == [
        one["id"]
    ]
    shown = laneway.json("task", "block", blocked["id"], "--by", two["id"])
    assert shown["blocked_by"] == [one["id"], two["id"]]
    # blocking again by the same task changes nothing
    again = laneway.json("task", "block", blocked["id"], "--by", two["id"])
    assert again["blocked_by"] == [one["id"], two["id"]]

    laneway.json("task", "move", one["id"], "Done")
    assert runs_of(laneway, blocked["id"], "blockers_resolved") == []
    laneway.json("task", "move", two["id"], "Done")
    (run,) = runs_of(laneway, blocked["id"], "blockers_resolved")
    assert sorted(run["payload"]["resolved_blocker_ids"]) == sorted([one["id"], two["id"]])
    assert (
        run["workflow_step_id"] == laneway.json("task", "show", blocked["id"])["workflow_step_id"]
    )
    assert len(applied(laneway.url, f"blockers_resolved:{blocked['id']}:")) == 1
    # a blocker that was done all along does not fire again by being touched
    laneway.json("task", "move", one["id"], "Done")
    assert len(applied(laneway.url, f"blockers_resolved:{blocked['id']}:")) == 1

    # unblocking: the task no longer lists it
    left = laneway.json("task", "unblock", blocked["id"], "--by", one["id"])
    assert left["blocked_by"] == [two["id"]]
    assert laneway.json("task", "show", blocked["id"])["blocked_by"] == [two["id"]]


def test_a_cycle_or_a_self_block_is_refused_with_one_line(laneway: Laneway) -> None:
    wf = office_board(laneway)
    a, b, c = (
        laneway.json("task", "create", "--workflow", wf, "--title", name)["id"]
        for name in ("a", "b", "c")
    )
    laneway.json("task", "block", a, "--by", b)
    laneway.json("task", "block", b, "--by", c)
    line = laneway.fails("task", "block", c, "--by", a)
    assert "cycle" in line
    assert f"{c} -> {a} -> {b} -> {c}" in line
    assert "cannot block itself" in laneway.fails("task", "block", a, "--by", a)
    assert "not blocked by" in laneway.fails("task", "unblock", a, "--by", c)
    assert "nope" in laneway.fails("task", "block", a, "--by", "nope")
    assert laneway.json("task", "show", c)["blocked_by"] == []


def test_deleting_a_blocker_takes_it_off_the_blocked_task(laneway: Laneway) -> None:
    wf = office_board(laneway)
    blocked = laneway.json("task", "create", "--workflow", wf, "--title", "waits")["id"]
    gone = laneway.json("task", "create", "--workflow", wf, "--title", "gone")["id"]
    laneway.json("task", "block", blocked, "--by", gone)
    laneway.json("task", "delete", gone)
    assert laneway.json("task", "show", blocked)["blocked_by"] == []
