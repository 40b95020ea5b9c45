"""Bad input: one line on stderr naming what is wrong, exit 1; usage errors exit 2; never a
traceback (CLI.md conventions)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import Host
from core.errors import DatabaseUrlRefused
from core.services.tasks import TaskService
from tests.cli.conftest import Laneway


@pytest.fixture
def board(sqlite_laneway: Laneway) -> dict[str, Any]:
    """An Office Default workflow with one task and one reviewer seat."""
    lw = sqlite_laneway
    wf = lw.json("workflow", "create", "--template", "office-default")
    lw.json("profile", "add", "rev", "--command", "agent")
    seat = lw.json(
        "participant", "add", "--step", "Review", "--role", "reviewer", "--profile", "rev",
        "--workflow", wf["id"],
    )  # fmt: skip
    task = lw.json("task", "create", "--workflow", wf["id"], "--title", "t")
    return {"workflow": wf, "task": task, "seat": seat}


def test_unknown_workflow(sqlite_laneway: Laneway) -> None:
    line = sqlite_laneway.fails("task", "create", "--workflow", "No Such Board", "--title", "t")
    assert "no workflow 'No Such Board'" in line


def test_unknown_step(sqlite_laneway: Laneway, board: dict[str, Any]) -> None:
    line = sqlite_laneway.fails("task", "move", board["task"]["id"], "Reveiw")
    assert "no step 'Reveiw'" in line
    assert "Office Default" in line


def test_unknown_task(sqlite_laneway: Laneway) -> None:
    assert "no task 'nope'" in sqlite_laneway.fails("task", "show", "nope")


def test_bad_verdict(sqlite_laneway: Laneway, board: dict[str, Any]) -> None:
    lw, task = sqlite_laneway, board["task"]
    lw.json("task", "move", task["id"], "review")
    line = lw.fails(
        "decision", "record", "--task", task["id"], "--step", "review",
        "--participant", board["seat"]["id"], "--verdict", "lgtm",
    )  # fmt: skip
    assert "verdict 'lgtm'" in line
    assert "approved" in line


def test_bad_role(sqlite_laneway: Laneway, board: dict[str, Any]) -> None:
    line = sqlite_laneway.fails(
        "participant", "add", "--step", "review", "--role", "boss", "--profile", "rev",
        "--workflow", board["workflow"]["id"],
    )  # fmt: skip
    assert "role 'boss'" in line


@pytest.mark.parametrize("item", ["NOVALUE", "=value"])
def test_bad_env_pair(sqlite_laneway: Laneway, item: str) -> None:
    line = sqlite_laneway.fails("profile", "add", "p", "--command", "agent", "--env", item)
    assert f"--env {item!r}" in line
    assert "KEY=VALUE" in line
    assert sqlite_laneway.json("profile", "list") == []


def test_unbalanced_quote_in_command(sqlite_laneway: Laneway) -> None:
    line = sqlite_laneway.fails("profile", "add", "p", "--command", "agent 'oops")
    assert "--command" in line


def test_duplicate_profile(sqlite_laneway: Laneway) -> None:
    sqlite_laneway.json("profile", "add", "p", "--command", "agent")
    assert "already exists" in sqlite_laneway.fails("profile", "add", "p", "--command", "x")


def test_import_missing_file(sqlite_laneway: Laneway, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yml"
    line = sqlite_laneway.fails("workflow", "import", str(missing))
    assert str(missing) in line
    assert "cannot read" in line


def test_import_yaml_syntax_error_names_file_and_line(
    sqlite_laneway: Laneway, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("id: x\nname: X\nsteps:\n  - id: a\n    name: A\n   oops: [\n")
    line = sqlite_laneway.fails("workflow", "import", str(bad))
    assert str(bad) in line
    assert "line 6" in line
    assert sqlite_laneway.json("workflow", "list") == []


def test_unknown_template(sqlite_laneway: Laneway) -> None:
    line = sqlite_laneway.fails("workflow", "create", "--template", "nope")
    assert "no template 'nope'" in line


def test_manual_move_refused_is_one_line(sqlite_laneway: Laneway, tmp_path: Path) -> None:
    path = tmp_path / "locked.yml"
    path.write_text(
        "id: locked\nname: Locked\nsteps:\n"
        "  - {id: a, name: A, position: 0, is_start_step: true}\n"
        "  - {id: b, name: B, position: 1, allow_manual_move: false}\n"
    )
    sqlite_laneway.json("workflow", "import", str(path))
    task = sqlite_laneway.json("task", "create", "--workflow", "locked", "--title", "t")
    assert "does not allow manual moves" in sqlite_laneway.fails("task", "move", task["id"], "b")


@pytest.mark.parametrize(
    "args",
    [
        ("no-such-command",),
        ("task", "create", "--title", "missing --workflow"),
        ("task", "move", "only-one-argument"),
        ("participant", "add", "--step", "s", "--role", "reviewer", "--profile", "p",
         "--task", "t", "--workflow", "w"),
        ("participant", "add", "--step", "s", "--role", "reviewer", "--profile", "p",
         "--position", "first"),
        ("--no-such-global", "task", "list"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2(sqlite_laneway: Laneway, args: tuple[str, ...]) -> None:
    stderr = sqlite_laneway.fails(*args, code=2)
    assert "Usage:" in stderr


@pytest.mark.parametrize(
    "args",
    [
        ("task", "list"),  # read-only
        ("task", "create", "--workflow", "w", "--title", "t"),  # writer
        ("recover",),  # writer
    ],
)
def test_not_initialised_says_run_init(fresh_laneway: Laneway, args: tuple[str, ...]) -> None:
    line = fresh_laneway.fails(*args)
    assert "not initialised" in line
    assert "laneway init" in line
    # Only `init` creates a database: a mistyped --db leaves nothing behind.
    path = Path(fresh_laneway.url.removeprefix("sqlite:///"))
    assert list(path.parent.iterdir()) == []


def test_init_creates_what_the_others_refused(fresh_laneway: Laneway) -> None:
    fresh_laneway.fails("workspace", "show")
    fresh_laneway.json("init")
    assert fresh_laneway.json("workspace", "show")["name"] == "Default"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("not a url at all", "database URL"),
        ("mysql://user:secret@db.example/board", "supports sqlite and postgresql"),
        # libpq reads a password from the query too: hidden there as well
        ("mysql://user@db.example/board?password=secret", "supports sqlite and postgresql"),
        ("mysql://db.example/board?sslpassword=secret&PASSWORD=secret", "sslpassword=***"),
    ],
)
def test_unusable_database_url(url: str, says: str) -> None:
    for args in (("init",), ("task", "list")):
        line = Laneway(url).fails(*args)
        assert says in line
        assert "secret" not in line


@pytest.mark.parametrize(
    ("given", "suggested"),
    [
        ("board.db", "sqlite:///board.db"),
        ("/srv/board.db", "sqlite:////srv/board.db"),
        ("~/boards/team.db", f"sqlite:///{Path.home()}/boards/team.db"),
        ("user:secret@db.example/board", "sqlite:///board.db"),
    ],
)
def test_a_file_path_as_the_database_url_says_which_url_to_write(
    given: str, suggested: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLI.md `--db URL`: a path where the URL goes (`--db board.db`, what a newcomer types)
    is one line naming the text and the URL to write instead, for every command; nothing is
    created, and text that may carry a password is not echoed."""
    monkeypatch.chdir(tmp_path)
    for args in (("init",), ("task", "list"), ("worker", "--once")):
        line = Laneway(given).fails(*args)
        assert line.startswith("laneway: database URL "), line
        assert "not a URL" in line, line
        assert suggested in line, line
        assert "secret" not in line, line
        assert "Could not parse" not in line
    assert Laneway(given).run("--json", "task", "list").stderr.count('"database_url"') == 1
    assert list(tmp_path.iterdir()) == []


def test_a_file_path_given_to_host_open_is_the_same_one_line(tmp_path: Path) -> None:
    """An embedding host's `Host.open("board.db")` gets the CLI's line, as a LanewayError
    with code database_url, not SQLAlchemy's ArgumentError."""
    with pytest.raises(
        DatabaseUrlRefused, match=r"not a URL; a SQLite file is sqlite:///board\.db"
    ):
        Host.open("board.db")
    assert DatabaseUrlRefused.code == "database_url"
    # SQLAlchemy's own URL object, as some embedders and tests pass it, still opens
    url = sa.engine.make_url(f"sqlite:///{tmp_path / 'board.db'}")
    with Host.open(url, upgrade=True) as host:  # type: ignore[arg-type]
        assert host.store.is_sqlite


def test_unexpected_exception_is_one_internal_error_line(
    sqlite_laneway: Laneway, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: TaskService, **_filters: Any) -> Any:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(TaskService, "list", broken)
    line = sqlite_laneway.fails("task", "list")
    assert line == "laneway: internal error: RuntimeError: boom second line"
    verbose = sqlite_laneway.run("-v", "task", "list")
    assert verbose.exit_code == 1
    assert "Traceback" in verbose.stderr  # only with -v
    assert verbose.stderr.rstrip().splitlines()[-1] == line


def test_log_json_lines_parse(sqlite_laneway: Laneway) -> None:
    for args in (("--log-json",), ("--log-json", "-v")):
        result = sqlite_laneway.run(*args, "--json", "workflow", "list")
        assert result.exit_code == 0
        assert json.loads(result.stdout) == []
        lines = result.stderr.splitlines()
        assert lines, "expected at least the INFO record of opening the host"
        records = [json.loads(line)["record"] for line in lines]
        levels = {r["level"]["name"] for r in records}
        assert "INFO" in levels
        assert ("DEBUG" in levels) == ("-v" in args)
        opened = next(r for r in records if r["name"] == "core.cli.app")
        assert opened["extra"]["command"] == "laneway workflow list"


def test_plain_mode_prints_only_warnings_as_plain_lines(
    sqlite_laneway: Laneway, board: dict[str, Any]
) -> None:
    quiet = sqlite_laneway.run("workflow", "list")
    assert quiet.stderr == ""
    # Approval has no approver seat, so its fan-out warns when the task arrives there.
    moved = sqlite_laneway.run("task", "move", board["task"]["id"], "approval")
    assert moved.exit_code == 0
    lines = moved.stderr.splitlines()
    assert lines
    for line in lines:
        assert line.startswith("WARNING: ")
    # With --json, that progress is machine-readable too.
    other = sqlite_laneway.json("task", "create", "--workflow", "office default", "--title", "u")
    again = sqlite_laneway.run("--json", "task", "move", other["id"], "approval")
    assert again.exit_code == 0
    records = [json.loads(line)["record"] for line in again.stderr.splitlines()]
    assert records
    assert {r["level"]["name"] for r in records} == {"WARNING"}
