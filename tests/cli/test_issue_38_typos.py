"""Issue 38 item 4: a typo'd action kind is named at import (with the declared kind nearest
to it), `workflow check` exits 1 on a problem, and a move to the step prints one readable line
per skipped action, never a Python dict."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Laneway

TYPO = """\
id: typo
name: Typo
steps:
  - id: todo
    name: Todo
    position: 0
    is_start_step: true
    allow_manual_move: true
  - id: work
    name: Work
    position: 1
    allow_manual_move: true
    events:
      on_enter:
        - type: enable_plan_mod
"""


def test_issue_38_item_4_typod_kind_is_named_at_import_check_fails_and_move_says_one_line(
    laneway: Laneway, tmp_path: Path
) -> None:
    path = tmp_path / "typo.yml"
    path.write_text(TYPO)
    imported = laneway.run("workflow", "import", str(path))
    assert imported.exit_code == 0  # its plugin may be installed later: imported, with a warning
    (warning,) = [line for line in imported.stderr.splitlines() if "enable_plan_mod'" in line]
    assert warning.startswith("WARNING: kind 'enable_plan_mod' is not declared")
    assert "did you mean 'enable_plan_mode'?" in warning
    assert "step=Work" in warning
    assert "field=events.on_enter[0]" in warning

    checked = laneway.run("workflow", "check", "Typo")
    assert checked.exit_code == 1
    assert checked.stdout.splitlines()[0] == (
        "workflow 'Typo', step 'Work', events.on_enter[0]: "
        "kind 'enable_plan_mod' is not declared by any loaded plugin"
    )
    as_json = laneway.run("--json", "workflow", "check", "Typo")
    assert as_json.exit_code == 1
    assert '"problems"' in as_json.stdout

    task = laneway.json("task", "create", "--workflow", "Typo", "--title", "t")
    moved = laneway.run("task", "move", task["id"], "Work")
    assert moved.exit_code == 0
    (line,) = moved.stderr.splitlines()
    assert line.startswith("WARNING: no plugin declares this action kind; skipped: ")
    assert "action_type=enable_plan_mod" in line
    assert "{'" not in line
    assert "'}" not in line
