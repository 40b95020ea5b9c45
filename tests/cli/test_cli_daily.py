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
