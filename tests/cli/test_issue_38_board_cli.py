"""Issue 38, the command line's part of items 12, 13 and 15: a task state is not a step (the
README's `task list` example finds a task at Review); the README and the `simple` template say
what starts an agent; blockers, parents and subtasks show in plain `task show` and `task list`
output; a blocked task's agent does not start (`task start` refuses with one line, an
arrival's auto start queues nothing) until its blockers are finished."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.cli.conftest import Laneway
from tests.cli.test_cli_subtasks import office_board

ROOT = Path(__file__).resolve().parents[2]


def _readme_task_list_example() -> list[str]:
    """The arguments of the README's `laneway task list ...` tour line (its comment cut)."""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("laneway task list "):
            return shlex.split(line.split("#", 1)[0])[1:]
    raise AssertionError("README.md has no `laneway task list` line")


def _kanban_with_runner(laneway: Laneway) -> dict[str, str]:
    wf = laneway.json("workflow", "create", "--template", "simple")
    laneway.json("profile", "add", "bot", "--command", "agent")
    laneway.json(
        "participant", "add", "--workflow", wf["id"], "--step", "In Progress",
        "--role", "runner", "--profile", "bot",
    )  # fmt: skip
    return {"wf": wf["id"], **{s["name"]: s["id"] for s in wf["steps"]}}


def test_issue_38_item_12_the_readme_task_list_example_finds_a_task_at_review(
    laneway: Laneway,
) -> None:
    board = _kanban_with_runner(laneway)
    login = laneway.json(
        "task", "create", "--workflow", board["wf"], "--title", "Fix the login page"
    )
    laneway.json("task", "move", login["id"], "Review")
    args = _readme_task_list_example()
    found = laneway.json(*args)
    assert [t["id"] for t in found] == [login["id"]], args


def test_issue_38_item_13_readme_and_template_say_what_starts_an_agent(
    laneway: Laneway,
) -> None:
    readme = (ROOT / "README.md").read_text()
    template = (ROOT / "core/workflows/templates/kanban.yml").read_text()
    # the old claim was untrue: a created task starts nothing
    assert "starts on its own" not in template
    assert "task start" in template
    assert re.search(r"`task create` starts no agent", readme), "README must say it"
    board = _kanban_with_runner(laneway)
    made = laneway.json("task", "create", "--workflow", board["wf"], "--title", "t")
    assert laneway.json("runs", "list", "--task", made["id"]) == []
    laneway.json("task", "start", made["id"])
    assert [r["reason"] for r in laneway.json("runs", "list", "--task", made["id"])] == [
        "task_assigned"
    ]


def test_issue_38_item_15_plain_task_show_and_list_name_parent_blockers_subtasks(
    laneway: Laneway,
) -> None:
    wf = office_board(laneway)
    parent = laneway.json("task", "create", "--workflow", wf, "--title", "epic")
    child = laneway.json(
        "task", "create", "--workflow", wf, "--title", "part one", "--parent", parent["id"]
    )
    gate = laneway.json("task", "create", "--workflow", wf, "--title", "the gate")
    laneway.json("task", "block", child["id"], "--by", gate["id"])

    shown = laneway.run("task", "show", child["id"])
    assert shown.exit_code == 0, shown.stderr
    text = shown.stdout
    assert f"  parent: {parent['id']} 'epic' (" in text, text
    assert f"  blocked by: {gate['id']} 'the gate' (" in text, text
    assert f"  its agent does not start until {gate['id']} is finished" in text, text
    assert "  subtasks: none" in text, text
    of_parent = laneway.run("task", "show", parent["id"]).stdout
    assert f"  subtasks: {child['id']} 'part one' (" in of_parent, of_parent

    listed = laneway.run("task", "list", "--workflow", wf).stdout.splitlines()
    (line,) = [row for row in listed if row.startswith(child["id"])]
    assert f"parent={parent['id'][-8:]}" in line
    assert f"blockers={gate['id'][-8:]}" in line

    laneway.json("task", "move", gate["id"], "Done")
    after = laneway.run("task", "show", child["id"]).stdout
    assert f"  blocked by: {gate['id']} 'the gate' (COMPLETED)" in after, after
    assert "does not start" not in after


def test_issue_38_item_15_a_blocked_task_does_not_start(laneway: Laneway) -> None:
    board = _kanban_with_runner(laneway)
    task = laneway.json("task", "create", "--workflow", board["wf"], "--title", "waits")
    gate = laneway.json("task", "create", "--workflow", board["wf"], "--title", "gate")
    laneway.json("task", "block", task["id"], "--by", gate["id"])

    line = laneway.fails("task", "start", task["id"])
    assert f"blocked by {gate['id']}" in line
    # a move into In Progress (whose entry starts the agent) moves it, and queues nothing
    moved = laneway.json("task", "move", task["id"], "In Progress")
    assert moved["workflow_step_id"] == board["In Progress"]
    assert laneway.json("runs", "list", "--task", task["id"]) == []

    laneway.json("task", "move", gate["id"], "Done")
    laneway.json("task", "start", task["id"], "--step", "In Progress")
    assert [r["reason"] for r in laneway.json("runs", "list", "--task", task["id"])] == [
        "task_assigned"
    ]
