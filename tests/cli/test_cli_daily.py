"""Issue 25 items 9-12: the command line for daily use (in-process, through click's runner)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Laneway


def test_workflow_templates_needs_no_database(fresh_laneway: Laneway, tmp_path: Path) -> None:
    """CLI.md conventions: `workflow templates` needs no database; none is made for it."""
    listed = fresh_laneway.json("workflow", "templates")
    assert {t["id"] for t in listed} >= {"simple", "office-default"}
    assert list(tmp_path.iterdir()) == []
    unreachable = Laneway("postgresql://nobody@127.0.0.1:1/none")
    assert unreachable.json("workflow", "templates") == listed
    text = fresh_laneway.run("workflow", "templates")
    assert text.exit_code == 0
    assert "office-default  Office Default  (5 steps) [hidden]" in text.stdout.splitlines()


def test_workflow_check_warns_where_no_agent_can_start(sqlite_laneway: Laneway) -> None:
    """Item 9: a step whose auto_start_agent finds no agent, and a board where no agent can
    start, are warnings (the check still exits 0 and lists no problems)."""
    lw = sqlite_laneway
    lw.json("workflow", "create", "--template", "simple")
    bare = lw.json("workflow", "check", "Kanban")
    assert bare["problems"] == []
    (step_warning, board_warning) = bare["warnings"]
    assert step_warning.startswith("workflow 'Kanban', step 'In Progress', events.on_enter[0]: ")
    assert "auto_start_agent finds no agent" in step_warning
    assert "--role runner" in step_warning
    assert "no agent profiles" in board_warning
    text = lw.run("workflow", "check", "Kanban")
    assert text.exit_code == 0
    assert f"warning: {step_warning}" in text.stdout.splitlines()

    lw.json("profile", "add", "coder", "--command", "true")
    with_profile = lw.json("workflow", "check", "Kanban")
    assert with_profile["warnings"][0] == step_warning
    assert "none of its actions resolves to an agent profile" in with_profile["warnings"][1]

    seat = ("--step", "In Progress", "--role", "runner", "--profile", "coder")
    lw.json("participant", "add", *seat, "--workflow", "Kanban")
    seated = lw.json("workflow", "check", "Kanban")
    assert seated["warnings"] == []
    (agent,) = seated["agents"]
    assert (agent["target"], agent["resolves_to"]) == ("primary", ["coder"])


def test_lists_name_profiles_steps_and_workflows(laneway: Laneway) -> None:
    """Item 10: `session list` and `entries list` print the profile's and the step's name,
    `task list` the workflow's; their JSON keeps the ids."""
    lw = laneway
    lw.json("workflow", "create", "--template", "office-default", "--name", "Daily Board")
    lw.json("profile", "add", "night-owl", "--command", "true")
    task = lw.json("task", "create", "--workflow", "Daily Board", "--title", "Sort the mail")
    session = lw.json("session", "start", task["id"], "--profile", "night-owl")
    moved_to = lw.json("task", "move", task["id"], "Review")["workflow_step_id"]

    (line,) = lw.run("session", "list", "--task", task["id"]).stdout.splitlines()
    assert line.endswith("  profile=night-owl")
    assert line.startswith(session["id"])
    (listed,) = lw.json("session", "list", "--task", task["id"])
    assert listed["agent_profile_id"] == session["agent_profile_id"]

    head = lw.run("entries", "list", "--task", task["id"]).stdout.splitlines()[0]
    assert "  step=Review  #1 E2 " in head
    (entry,) = lw.json("entries", "list", "--task", task["id"])
    assert entry["step_id"] == moved_to

    (row,) = lw.run("task", "list").stdout.splitlines()
    assert row == f"{task['id']}  'Sort the mail'  workflow='Daily Board' step=Review state=TODO"


def test_the_eight_characters_the_page_shows_name_a_task_session_and_run_everywhere(
    sqlite_laneway: Laneway,
) -> None:
    """Item 10 and CLI.md's naming rule: every command that takes a task, session or run
    takes the last 8 characters of its id (and a task its exact title). One dialect: the
    lookup's SQL is the same on both, and test_cli_lookups runs it on PostgreSQL too."""
    lw = sqlite_laneway
    lw.json("workflow", "create", "--template", "simple")
    lw.json("profile", "add", "coder", "--command", "true")
    lw.json("participant", "add", "--step", "In Progress", "--role", "runner", "--profile",
            "coder", "--workflow", "Kanban")  # fmt: skip
    task = lw.json("task", "create", "--workflow", "Kanban", "--title", "Short ids")
    t = task["id"][-8:]
    moved = lw.json("task", "move", t, "Review")
    assert moved["id"] == task["id"]
    assert lw.json("task", "move", "Short ids", "Backlog")["id"] == task["id"]
    started = lw.json("task", "start", t)  # In Progress: the runner seat's run is queued
    assert started["id"] == task["id"]
    (run,) = lw.json("runs", "list", "--task", t)
    r = run["id"][-8:]
    session = lw.json("session", "start", t, "--profile", "coder")
    s = session["id"][-8:]

    by_task = [
        ("task", "show", t),
        ("task", "update", t, "--step", "In Progress"),
        ("task", "comment", t, "a note"),
        ("task", "comments", t),
        ("participant", "list", "--step", "Review", "--task", t),
        ("session", "list", "--task", t),
        ("turn", "start", t, "--session", s),
        ("turn", "complete", t, "--session", s),
        ("decision", "list", "--task", t),
        ("entries", "list", "--task", t),
        ("permission", "list", "--task", t),
        ("session", "send", s, "hello"),
        ("session", "log", s, "--run", r),
        ("runs", "show", r),
        ("runs", "cancel", r),
        ("runs", "retry", r),
        ("task", "cancel", t),
        ("task", "archive", t),
    ]
    for args in by_task:
        result = lw.run("--json", *args)
        assert result.exit_code == 0, (args, result.stderr)
    assert lw.json("task", "delete", t) == {"deleted": task["id"]}
