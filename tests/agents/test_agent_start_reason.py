"""Issue 38 item 17: an agent that dies at start says why. `npx claude-code-acp` run in a
repository fails with npm's reason on stderr and then npm's "see the log" line; laneway showed
that last line alone. The run's error now ends with the agent's last stderr lines, and the
transcript keeps what it wrote."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.agents.conftest import laneway
from tests.agents.test_acp_worker import workflow_yaml

pytestmark = pytest.mark.slow

# What npx prints when the package is not there to run, then its exit status
NPM_LIKE = (
    "import sys; "
    "sys.stderr.write('npm error code E404\\n"
    "npm error 404 Not Found - GET https://registry.npmjs.org/claude-code-acp\\n"
    "npm error 404\\n"
    "npm error A complete log of this run can be found in: /root/.npm/_logs/debug-0.log\\n'); "
    "sys.exit(1)"
)


@pytest.mark.one_database
def test_issue_38_item_17_an_acp_agent_that_dies_at_start_shows_its_reason(
    db_url: str, tmp_path: Path
) -> None:
    def ok(*args: str) -> str:
        done = laneway("--db", db_url, *args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout

    path = tmp_path / "acp.yml"
    path.write_text(workflow_yaml([]))
    ok("init")
    ok("workflow", "import", str(path))
    command = shlex.join([sys.executable, "-c", NPM_LIKE])
    ok("profile", "add", "claude", "--protocol", "acp", "--command", command)
    ok("participant", "add", "--workflow", "ACP", "--step", "Work", "--role", "runner",
       "--profile", "claude")  # fmt: skip
    task = json.loads(ok("--json", "task", "create", "--workflow", "ACP", "--title", "Card",
                         "--step", "Backlog"))["id"]  # fmt: skip
    ok("task", "start", task)
    ok("worker", "--once")

    (run,) = json.loads(ok("--json", "runs", "list", "--task", task))
    assert run["status"] == "failed"
    error = run["error_message"]
    assert "\n" not in error
    assert error.startswith("the agent exited at start (exit status 1)")
    # the reason, not only npm's last line
    assert "npm error 404 Not Found - GET https://registry.npmjs.org/claude-code-acp" in error
    assert "npm error code E404" in error
    assert error.endswith(
        "A complete log of this run can be found in: /root/.npm/_logs/debug-0.log"
    )

    shown = ok("runs", "show", run["id"])
    assert "npm error 404 Not Found" in shown
    session = json.loads(ok("--json", "session", "list", "--task", task))[0]["id"]
    items = json.loads(ok("--json", "session", "log", session))
    (stderr,) = [i["text"] for i in items if i["kind"] == "stderr"]
    assert stderr.splitlines() == [
        "npm error code E404",
        "npm error 404 Not Found - GET https://registry.npmjs.org/claude-code-acp",
        "npm error 404",
        "npm error A complete log of this run can be found in: /root/.npm/_logs/debug-0.log",
    ]
