"""What a new user trips on (issue 10's "small things"), each with its test: the command line
and the Python API as someone meets them for the first time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from core import Host, logs
from core.errors import LanewayError
from core.model import Workflow
from core.plugin.loading import load_plugins
from core.plugin.selection import PluginSelection
from core.runs import RunRequest
from tests.cli.conftest import Laneway
from tests.conftest import REPO, open_host

LANEWAY = Path(sys.executable).with_name("laneway")


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None, powerless: bool = False,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The installed `laneway` script, as a real process; `powerless` drops every capability
    (root then obeys file modes, as any user does, and still reaches its own files)."""
    argv = [str(LANEWAY), *args]
    if powerless:
        argv = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", *argv]
    full_env = {**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office", **(env or {})}
    full_env.pop("LANEWAY_DB", None)
    return subprocess.run(
        argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("laneway: ")
    assert "internal error" not in line
    assert "not initialised" not in line
    return line


# -- plugins ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_plugins_list_works_without_a_database(tmp_path: Path) -> None:
    """Right after `pip install`, in an empty directory: it lists the installed plugins and
    creates no database."""
    done = _cli("--json", "plugins", "list", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    names = {p["name"]: p for p in json.loads(done.stdout)}
    assert {"core", "kanban", "office"} <= names.keys()
    assert names["office"]["enabled"] is True
    assert "queue_run" in names["office"]["kinds"]
    assert list(tmp_path.iterdir()) == []
    off = json.loads(_cli("--json", "--no-office", "plugins", "list", cwd=tmp_path).stdout)
    assert next(p for p in off if p["name"] == "office")["enabled"] is False


def test_allow_list_name_matching_no_plugin_is_warned(laneway_logs: list[dict[str, Any]]) -> None:
    """`LANEWAY_PLUGINS_ALLOW=kanban,offfice`: the misspelt name is warned about, by name."""
    load_plugins(PluginSelection(allow=frozenset({"kanban", "offfice"})))

    (warning,) = [r for r in laneway_logs if r["level"] == "WARNING"]
    assert warning["extra"]["plugin"] == "offfice"
    assert "office" in warning["extra"]["known"]


@pytest.mark.slow
def test_allow_list_warning_reaches_the_command_line(tmp_path: Path) -> None:
    done = _cli("plugins", "list", cwd=tmp_path, env={"LANEWAY_PLUGINS_ALLOW": "kanban,offfice"})
    assert done.returncode == 0
    assert "offfice" in done.stderr
    assert "WARNING" in done.stderr


# -- the database file -------------------------------------------------------------------------


@pytest.mark.slow
def test_corrupt_database_file_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "board.db").write_text("these are my notes, not a database\n")
    for args in (("init",), ("task", "list"), ("recover",)):
        line = _one_line(_cli("--db", "sqlite:///board.db", *args, cwd=tmp_path))
        assert "board.db is not a SQLite database" in line
    with pytest.raises(LanewayError, match="not a SQLite database"):
        Host.open(f"sqlite:///{tmp_path / 'board.db'}")


@pytest.mark.slow
def test_read_only_directory_is_one_clear_line() -> None:
    """A directory the user may not write (mode 0555; run without capabilities, since root
    with them writes anywhere)."""
    with tempfile.TemporaryDirectory(prefix="laneway-ro-") as folder:
        here = Path(folder)
        os.chmod(folder, 0o555)
        try:
            line = _one_line(_cli("init", cwd=here, powerless=True))
        finally:
            os.chmod(folder, 0o755)
        assert "read-only" in line
        assert "directory" in line
        assert list(here.iterdir()) == []


@pytest.mark.slow
def test_two_slash_sqlite_url_is_one_clear_line(tmp_path: Path) -> None:
    for url in ("sqlite://board.db", "sqlite://"):
        line = _one_line(_cli("--db", url, "init", cwd=tmp_path))
        assert "sqlite:///" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_init_refuses_to_create_a_missing_directory(tmp_path: Path) -> None:
    line = _one_line(_cli("--db", "sqlite:///no/such/dir/board.db", "init", cwd=tmp_path))
    assert "directory no/such/dir does not exist" in line
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(LanewayError, match="does not exist"):
        Host.open(f"sqlite:///{tmp_path / 'missing' / 'board.db'}")
    assert list(tmp_path.iterdir()) == []


# -- the Python API ------------------------------------------------------------------------------


def test_python_api_checks_argument_types(sqlite_url: str) -> None:
    with open_host(sqlite_url) as host:
        wf = host.workflows.create_from_template("simple")
        with pytest.raises(LanewayError, match=r"tasks\.create: argument 'title' must be str"):
            host.tasks.create(workflow=wf.id, title=123)  # type: ignore[arg-type]
        with pytest.raises(LanewayError, match="argument 'ref' must be str, got int"):
            host.tasks.get(7)  # type: ignore[arg-type]
        with pytest.raises(LanewayError, match="argument 'step'"):
            host.tasks.move("x", None)  # type: ignore[arg-type]
        with pytest.raises(LanewayError, match="argument 'limit' must be int, got bool"):
            host.workflows.set_max_step_arrivals(wf.id, True)
        assert host.tasks.list() == []  # nothing was written


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_readme_embedding_snippet_runs_twice(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Embedding", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert snippet is not None
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", snippet.group(1)],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    with open_host(f"sqlite:///{tmp_path / 'board.db'}") as host:
        assert len(host.workflows.list()) == 1
        assert len(host.tasks.list()) == 2


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_logs_enable_honours_the_level(tmp_path: Path) -> None:
    """In an embedding program (loguru's default handler still installed): with
    `enable(level="info")` a DEBUG record is printed nowhere, an INFO one is."""
    code = (
        "from core import logs\n"
        "from loguru import logger\n"
        "logs.enable(level='info')\n"
        "logger.bind(probe=1).debug('a debug record')\n"
        "logger.bind(probe=2).info('an info record')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "an info record" in done.stderr
    assert "a debug record" not in done.stderr
    with pytest.raises(ValueError, match="no such level"):
        logs.enable(level="loud")


# -- what the commands print ----------------------------------------------------------------------


def test_json_errors_are_one_json_object_on_stderr(sqlite_laneway: Laneway) -> None:
    """CLI.md `--json` errors, with house issue item 4's stable `code` beside the wording."""
    result = sqlite_laneway.run("--json", "task", "show", "no-such-task")
    assert result.exit_code == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert json.loads(line) == {"error": "no task 'no-such-task'", "code": "not_found"}


def test_json_error_code_names_an_uninitialised_database(tmp_path: Path) -> None:
    """House issue item 4: a NotInitialised refusal says `not_initialised`, exit code still 1."""
    fresh = Laneway(f"sqlite:///{tmp_path / 'fresh.db'}")
    result = fresh.run("--json", "task", "list")
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    body = json.loads(line)
    assert body["code"] == "not_initialised", body
    assert "laneway init" in body["error"]


WIP_BOARD = """
version: 1
type: kandev_workflow
workflows:
  - name: Narrow
    steps:
      - {name: Work, position: 0, is_start_step: true}
      - {name: Review, position: 1, wip_limit: 1}
      - {name: Done, position: 2}
"""


def test_output_names_steps_and_a_queued_placement_says_queued(
    sqlite_laneway: Laneway, tmp_path: Path
) -> None:
    lw = sqlite_laneway
    path = tmp_path / "narrow.yml"
    path.write_text(WIP_BOARD)
    lw.json("workflow", "import", str(path))
    first, second = (
        lw.json("task", "create", "--workflow", "Narrow", "--title", title)
        for title in ("first", "second")
    )

    moved = lw.run("task", "move", first["id"], "Review")
    queued = lw.run("task", "move", second["id"], "Review")
    shown = lw.run("task", "show", second["id"])

    assert moved.stdout.strip() == f"task {first['id']}: moved from Work to Review"
    assert queued.stdout.strip().startswith(f"task {second['id']}: queued for Review")
    assert "step=Review" in shown.stdout
    assert "queued" in shown.stdout


def _office_board(lw: Laneway) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    wf = lw.json("workflow", "create", "--template", "office-default")
    lw.json("profile", "add", "rev", "--command", "true", "--role", "reviewer")
    lw.json("participant", "add", "--workflow", wf["id"], "--step", "Review",
            "--role", "reviewer", "--profile", "rev")  # fmt: skip
    task = lw.json("task", "create", "--workflow", wf["id"], "--title", "t")
    session = lw.json("session", "start", task["id"])
    return wf, task, session


def test_no_transition_says_which_guard_refused_and_why(sqlite_laneway: Laneway) -> None:
    lw = sqlite_laneway
    _wf, task, _session = _office_board(lw)
    lw.json("task", "move", task["id"], "Review")

    text = lw.run("turn", "complete", task["id"]).stdout.strip()
    shaped = lw.json("turn", "complete", task["id"])

    assert text.startswith(f"task {task['id']}: no transition at Review (guard wait_for_quorum")
    assert "move_to_step Approval: threshold_not_met" in text
    assert "approved=0" in text
    assert shaped["transitioned"] is False
    assert {r["guard"] for r in shaped["refusals"]} == {"wait_for_quorum"}


def test_agent_fail_on_an_office_task_says_why_it_did_not_dispatch(
    sqlite_laneway: Laneway,
) -> None:
    lw = sqlite_laneway
    wf, task, session = _office_board(lw)
    lw.json("workspace", "set", "--office-workflow", wf["id"])

    shown = lw.json("agent", "fail", task["id"], "--session", session["id"], "--message", "x")
    text = lw.run("agent", "fail", task["id"], "--session", session["id"], "--execution", "e2")

    assert shown["dispatched"] is False
    assert "office" in shown["reason"]
    assert "claimed" in shown["reason"]
    assert "not dispatched" in text.stdout
    assert "claimed runs" in text.stdout


def test_runs_list_status_filters(sqlite_url: str) -> None:
    with open_host(sqlite_url) as host:
        wf: Workflow = host.workflows.create_from_template("simple")
        task = host.tasks.create(workflow=wf.id, title="t")
        agent = host.profiles.add("a", command=["true"])
        step = wf.steps[0].id
        ids = [
            host.runs.enqueue(
                RunRequest(agent.id, task.id, step, f"r{i}", coalesce_exempt=True)
            ).run_id
            for i in range(2)
        ]
        with host.store.transaction() as uow:
            from core.store import tables as t

            uow.conn.execute(t.runs.update().where(t.runs.c.id == ids[1]).values(status="finished"))
    lw = Laneway(sqlite_url)

    assert [r["id"] for r in lw.json("runs", "list", "--status", "queued")] == [ids[0]]
    assert [r["id"] for r in lw.json("runs", "list", "--status", "FINISHED")] == [ids[1]]
    assert lw.json("runs", "list", "--status", "failed") == []
    assert "'bogus' is not one of" in lw.fails("runs", "list", "--status", "bogus", code=2)


@pytest.mark.slow
def test_demo_db_leaves_no_temporary_folders(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = _cli("--db", "sqlite:///board.db", "demo", cwd=tmp_path, env={"TMPDIR": str(scratch)},
                timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert list(scratch.iterdir()) == []
    assert (tmp_path / "board.db").exists()


def test_task_start_with_no_runner_seat_says_nothing_is_queued(
    sqlite_laneway: Laneway,
) -> None:
    """`task start` on an Office board nobody sits at: a WARNING says no agent works the
    step, instead of silently queueing nothing."""
    lw = sqlite_laneway
    wf = lw.json("workflow", "create", "--template", "office-default")
    task = lw.json("task", "create", "--workflow", wf["id"], "--title", "t")

    started = lw.run("task", "start", task["id"])

    assert started.exit_code == 0
    assert "no agent works it" in started.stderr
    assert "step=Work" in started.stdout
    assert lw.json("runs", "list", "--task", task["id"]) == []


def test_task_create_without_workflow_takes_the_boards_only_one_or_says_what_to_do(
    sqlite_laneway: Laneway,
) -> None:
    """A fresh board has no workflow, and `task create --title T` ended at click's bare
    "Missing option '--workflow'". Now: with none, the usage error (exit 2) says how to make
    one; with exactly one, the task goes there; with several, it names them and nothing is
    created."""
    lw = sqlite_laneway
    none = lw.run("task", "create", "--title", "first")
    assert none.exit_code == 2
    assert "the board has no workflow yet" in none.stderr
    assert "laneway workflow create --template simple" in none.stderr
    assert lw.json("task", "list") == []

    only = lw.json("workflow", "create", "--template", "simple")
    made = lw.json("task", "create", "--title", "first")
    assert made["workflow_id"] == only["id"]

    lw.json("workflow", "create", "--template", "simple", "--name", "Second")
    several = lw.run("task", "create", "--title", "second")
    assert several.exit_code == 2
    assert "the board has 2 workflows (Kanban, Second); name one" in several.stderr
    assert [t["title"] for t in lw.json("task", "list")] == ["first"]
