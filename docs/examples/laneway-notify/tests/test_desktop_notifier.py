"""The desktop notifier (issue 42 item 2): a ``task.needs_person`` committed by a laneway
process with this plugin loaded starts ``notify-send`` (here a fake one on PATH, recording
its arguments) with the task's title and what it waits for; ``LANEWAY_NOTIFY_COMMAND`` names
another command, or ``off``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laneway_notify import desktop

LANEWAY = str(Path(sys.executable).with_name("laneway"))


def fake_notifier(directory: Path, name: str = "notify-send") -> Path:
    """An executable that appends its arguments, as one JSON line, to ``calls.jsonl``."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "calls.jsonl"
    script = directory / name
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"with open({str(log)!r}, 'a') as out:\n"
        "    out.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    script.chmod(0o755)
    return log


def calls(log: Path, count: int, timeout: float = 30.0) -> list[list[str]]:
    """The notifier's calls once there are `count` (it runs detached: wait for it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists():
            found = [json.loads(line) for line in log.read_text().splitlines() if line]
            if len(found) >= count:
                return found
        time.sleep(0.05)
    raise AssertionError(f"the notifier was called {log.exists() and log.read_text()!r}")


def laneway(db: str, env: dict[str, str], *args: str) -> dict[str, str]:
    done = subprocess.run(
        [LANEWAY, "--db", db, "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, str] = json.loads(done.stdout)
    return found


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith("LANEWAY_") or k == "LANEWAY_HOME"
    }
    return base | {
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "LANEWAY_PLUGINS_ALLOW": "kanban,office,notify",
    }


def test_a_blocked_task_calls_notify_send_from_the_cli_process(
    tmp_path: Path, env: dict[str, str]
) -> None:
    log = fake_notifier(tmp_path / "bin")
    db = f"sqlite:///{tmp_path / 'board.db'}"
    laneway(db, env, "init")
    laneway(db, env, "workflow", "create", "--template", "simple")
    task = laneway(db, env, "task", "create", "--workflow", "Kanban", "--title", "Fix the login")
    gate = laneway(db, env, "task", "create", "--workflow", "Kanban", "--title", "Land it")
    assert not log.exists()  # nothing needs a person yet

    laneway(db, env, "task", "block", task["id"], "--by", gate["id"])

    [call] = calls(log, 1)
    assert call == [
        "--app-name=laneway",
        "laneway: “Fix the login” needs you",
        "an unfinished task blocks it",
    ]


def test_a_documented_command_instead_and_off(tmp_path: Path, env: dict[str, str]) -> None:
    log = fake_notifier(tmp_path / "elsewhere", "tell-me")
    env = env | {desktop.ENV_COMMAND: f"{tmp_path / 'elsewhere' / 'tell-me'} --urgent"}
    db = f"sqlite:///{tmp_path / 'board.db'}"
    laneway(db, env, "init")
    laneway(db, env, "workflow", "create", "--template", "simple")
    a = laneway(db, env, "task", "create", "--workflow", "Kanban", "--title", "A")
    b = laneway(db, env, "task", "create", "--workflow", "Kanban", "--title", "B")
    c = laneway(db, env, "task", "create", "--workflow", "Kanban", "--title", "C")
    laneway(db, env, "task", "block", a["id"], "--by", b["id"])
    assert calls(log, 1) == [["--urgent", "laneway: “A” needs you", "an unfinished task blocks it"]]

    laneway(db, env | {desktop.ENV_COMMAND: "off"}, "task", "block", c["id"], "--by", b["id"])
    time.sleep(0.5)  # a notifier that was started would have written by now; none is
    assert len(calls(log, 1)) == 1


def test_the_message_of_each_reason() -> None:
    assert desktop.message({"reason": "permission"}, "T") == (
        "laneway: “T” needs you",
        "its agent asks for permission",
    )
    assert desktop.message({"reason": "failure", "error": "exit 3"}, "T")[1] == (
        "its agent failed: exit 3"
    )
    assert desktop.message({"reason": "new"}, "T")[1] == "it waits for a person"


def test_no_notify_send_and_no_command_means_no_notifier(tmp_path: Path) -> None:
    assert desktop.command({"PATH": str(tmp_path)}) is None
    assert desktop.command({desktop.ENV_COMMAND: "off", "PATH": str(tmp_path)}) is None
    assert desktop.command({desktop.ENV_COMMAND: "say 'it now'"}) == ["say", "it now"]
