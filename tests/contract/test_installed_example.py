"""The example third-party plugin (docs/examples/laneway-notify), installed the ordinary way
(`pip install -e docs/examples/laneway-notify`, as .ci/run does), is found through its
`laneway.plugins` entry point by the real `laneway` command: `plugins list` shows it, and a
task arriving at a step that declares `notify` runs it once, surviving a recovery pass."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

BOARD = """
version: 1
type: kandev_workflow
workflows:
  - name: Notified
    steps:
      - {name: Inbox, position: 0, is_start_step: true}
      - name: Review
        position: 1
        events:
          on_enter:
            - type: notify
              config: {message: ready for review}
"""


@pytest.fixture(scope="module")
def installed() -> None:
    if not [ep for ep in entry_points(group="laneway.plugins") if ep.name == "notify"]:
        hint = "install it: pip install -e docs/examples/laneway-notify"
        if os.environ.get("CI"):
            pytest.fail(f"the example plugin is not installed in CI; {hint}")
        pytest.skip(f"the example plugin laneway-notify is not installed; {hint}")


def _script() -> str:
    beside = Path(sys.executable).with_name("laneway")
    if beside.exists():
        return str(beside)
    found = shutil.which("laneway")
    if found is None:
        pytest.skip("the laneway console script is not installed (pip install -e .)")
    return found


def laneway(*args: str, cwd: Path, notify_file: Path) -> Any:
    """Run `laneway --json ARGS` with every installed plugin (no allow- or block-list)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LANEWAY_PLUGINS_ALLOW", "LANEWAY_PLUGINS_BLOCK", "LANEWAY_FAULT")
    }
    env["LANEWAY_DB"] = f"sqlite:///{cwd / 'board.db'}"
    env["LANEWAY_NOTIFY_FILE"] = str(notify_file)
    done = subprocess.run(
        [_script(), "--json", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return json.loads(done.stdout)


def notifications(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.usefixtures("installed")
def test_plugins_list_shows_the_installed_example(tmp_path: Path) -> None:
    laneway("init", cwd=tmp_path, notify_file=tmp_path / "n.jsonl")
    listed = {
        p["name"]: p
        for p in laneway("plugins", "list", cwd=tmp_path, notify_file=tmp_path / "n.jsonl")
    }
    assert listed["notify"] == {
        "name": "notify",
        "version": "0.1.0",
        "kinds": ["notify"],
        "guards": [],
        "enabled": True,
        "error": None,
    }
    # the built-in plugins are listed beside it, unchanged
    assert {"kanban", "office"} <= set(listed)


@pytest.mark.usefixtures("installed")
def test_a_task_arriving_at_a_notify_step_writes_once(tmp_path: Path) -> None:
    sent = tmp_path / "notifications.jsonl"
    board = tmp_path / "board.yml"
    board.write_text(textwrap.dedent(BOARD))
    laneway("init", cwd=tmp_path, notify_file=sent)
    laneway("workflow", "import", str(board), cwd=tmp_path, notify_file=sent)
    task = laneway(
        "task",
        "create",
        "--workflow",
        "Notified",
        "--title",
        "ship it",
        cwd=tmp_path,
        notify_file=sent,
    )
    laneway("task", "move", task["id"], "Review", cwd=tmp_path, notify_file=sent)

    written = notifications(sent)
    assert [(n["task_id"], n["step_name"], n["message"]) for n in written] == [
        (task["id"], "Review", "ready for review")
    ]
    entries = laneway("entries", "list", "--task", task["id"], cwd=tmp_path, notify_file=sent)
    (entry,) = entries
    assert entry["terminal"] is True
    assert [(m["kind"], m["state"]) for m in entry["markers"]] == [("notify", "done")]

    # another process start (recovery scan) finds nothing to redo: still one line
    report = laneway("recover", cwd=tmp_path, notify_file=sent)
    assert report["scanned"] == 0
    assert len(notifications(sent)) == 1
