"""docs/agents.md is true: its agent, saved as the page says, and its Office wiring, run as
written (a real shell, the installed `laneway` script, real agent processes), take a task
through a failure, the CEO, review and approval to Done."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

AGENTS_MD = REPO / "docs" / "agents.md"


def _block(language: str, after: str) -> str:
    text = AGENTS_MD.read_text()
    section = text.split(after, 1)[1]
    found = re.search(rf"```{language}\n(.*?)```", section, re.DOTALL)
    assert found is not None, f"no {language} block after {after!r}"
    return found.group(1)


def test_the_agent_is_twenty_lines_of_python() -> None:
    agent = _block("python", "## A complete agent")
    assert len(agent.strip().splitlines()) <= 20
    compile(agent, "agent.py", "exec")


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_an_office_board_wired_by_hand_from_the_page_reaches_done(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(_block("python", "## A complete agent"))
    script = _block("sh", "## Wiring an Office board by hand")
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "LANEWAY_PLUGINS_ALLOW": "kanban,office",
    }
    env.pop("LANEWAY_DB", None)

    done = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "step=Done state=COMPLETED" in done.stdout
    assert not (tmp_path / "crash-once").exists()  # the worker's first turn failed
    runs = subprocess.run(
        ["laneway", "--json", "runs", "list"],
        cwd=tmp_path, env={**env, "LANEWAY_DB": "sqlite:///board.db"},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    by_reason = {r["reason"]: r["status"] for r in json.loads(runs.stdout)}
    assert by_reason == {
        "task_assigned": "failed",
        "agent_error": "finished",
        "review_started": "finished",
        "approval_started": "finished",
    }
