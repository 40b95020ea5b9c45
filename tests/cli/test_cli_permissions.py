"""CLI.md `permission list [--task T] [--state pending|allowed|denied|cancelled]` and
`permission allow ID [--always]` / `permission deny ID` in text form, and their bad input as
one line (the JSON shapes and the waiting worker: tests/agents/test_acp_permission_requests)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Laneway
from tests.conftest import open_host
from tests.store.test_store_permissions import _asked


def test_text_lines_and_one_line_errors(laneway: Laneway, tmp_path: Path) -> None:
    assert laneway.run("permission", "list").stdout.splitlines() == ["no permission requests"]
    with open_host(laneway.url) as host:
        asked, run_id = _asked(host, tmp_path)
    (line,) = laneway.run("permission", "list", "--state", "pending").stdout.splitlines()
    assert line == f"{asked.id}  pending  task={asked.task_id}  run={run_id}  Edit a.py"
    assert "'maybe' is not one of" in laneway.fails(
        "permission", "list", "--state", "maybe", code=2
    )
    assert laneway.fails("permission", "allow", "nosuchid") == (
        "laneway: no permission request 'nosuchid'"
    )
    answered = laneway.run("permission", "allow", asked.id[-8:], "--by", "alice")
    assert answered.stdout.splitlines() == [
        f"{asked.id}  allowed  task={asked.task_id}  run={run_id}  Edit a.py  option=yes  by=alice"
    ]
    assert laneway.fails("permission", "deny", asked.id) == (
        f"laneway: permission {asked.id} is already allowed by alice; it cannot be answered"
    )
    assert [p["state"] for p in laneway.json("permission", "list", "--task", asked.task_id)] == [
        "allowed"
    ]
