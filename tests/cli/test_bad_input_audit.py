"""Bad input a user can give, each a clear one-line error (never an internal error, a
misleading database error or a hang), found by an audit of the CLI, the HTTP API, workflow
files, agents' output and the environment: explicit YAML tags whose text is not of their type,
a FIFO as a workflow file, a path longer than the system allows, a damaged SQLite file,
references and search text past SQLite's LIKE limit, a malformed hook URL, out-of-range
settings in the environment, JSON nested past the parser's depth from an agent or a tool
call."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from core.agents.tools import wire
from core.agents.turns import retry_delays_from_env
from core.cli.failures import code_of
from core.errors import LanewayError
from core.host import Host
from core.serve.app import build_app
from core.services import hooks, unattended
from tests.cli.conftest import Laneway

TOKEN = "bad-input-audit-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    "value",
    ["!!timestamp foo", "!!timestamp 2020-13-45", "!!int 0x", "!!float foo", "!!bool no-no"],
)
def test_a_tagged_value_not_of_its_type_is_one_line_naming_the_file(
    sqlite_laneway: Laneway, tmp_path: Path, value: str
) -> None:
    path = tmp_path / "tagged.yml"
    path.write_text(f"id: tagged\nname: Tagged\ncolor: {value}\nsteps: []\n")
    said = sqlite_laneway.fails("workflow", "import", str(path))
    assert "internal error" not in said
    assert "tagged.yml" in said
    assert "a tagged value is not of its tag's type" in said


def test_a_fifo_as_a_workflow_file_is_refused_not_waited_on(
    sqlite_laneway: Laneway, tmp_path: Path
) -> None:
    fifo = tmp_path / "flow.yml"
    os.mkfifo(fifo)  # no writer: reading it would wait for ever
    said = sqlite_laneway.fails("workflow", "import", str(fifo))
    assert said.endswith("not a regular file") or "not a regular file" in said


def test_a_database_path_longer_than_the_system_allows_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / ('x' * 300)}.db"
    for args in (("init",), ("task", "list")):
        said = Laneway(url).fails(*args)
        assert said.startswith("laneway: file name too long: ")
        assert "(" in said  # the name is cut, its length said


def test_a_damaged_sqlite_file_says_so_in_one_line(tmp_path: Path) -> None:
    board = tmp_path / "board.db"
    lw = Laneway(f"sqlite:///{board}")
    lw.json("init")
    lw.json("workflow", "create", "--template", "simple")
    for n in range(50):
        lw.json("task", "create", "--workflow", "Kanban", "--title", f"task {n} " + "x" * 200)
    damaged = tmp_path / "damaged.db"
    shutil.copyfile(board, damaged)
    with open(damaged, "r+b") as handle:
        handle.truncate(8192)  # its header still says SQLite
    cut = Laneway(f"sqlite:///{damaged}")
    said = cut.fails("task", "list")
    assert said.startswith("laneway: database damaged: ")
    assert "restore it from a backup" in said
    failed = cut.run("--json", "task", "list")
    assert json.loads(failed.stdout or failed.stderr)["code"] == "database_unusable"


def test_references_and_search_text_past_sqlites_like_limit_are_the_users_errors(
    sqlite_laneway: Laneway,
) -> None:
    sqlite_laneway.json("workflow", "create", "--template", "simple")
    long = "x" * 60_000
    said = sqlite_laneway.fails("task", "show", long)
    assert said.startswith("laneway: no task 'xxxx")
    assert "(60000 characters)" in said
    said = sqlite_laneway.fails("task", "list", "--search", long)
    assert said == "laneway: search text: at most 10000 characters, got 60000"


def test_the_json_code_of_a_database_error_is_laneways_not_sqlalchemys() -> None:
    refused = sa.exc.OperationalError("SELECT 1", {}, Exception("database is locked"))
    assert code_of(refused) == "unavailable"


@pytest.mark.parametrize(
    "url", ["http://[::1/x", "http://example.com:99999/x", "http://example.com:abc/x"]
)
def test_a_malformed_hook_url_is_one_line(sqlite_laneway: Laneway, url: str) -> None:
    said = sqlite_laneway.fails("hook", "add", url)
    assert said.startswith(f"laneway: hook URL {url!r}")


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e12", "1e300", "-5"])
def test_settings_out_of_range_fall_back_to_their_defaults(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LANEWAY_UNATTENDED_S", value)
    assert unattended.bound_s() == unattended.DEFAULT_BOUND_S
    for name in (hooks.LEASE_ENV, hooks.WINDOW_ENV, hooks.BASE_ENV):
        monkeypatch.setenv(name, value)
    assert hooks._lease_s() == hooks.LEASE_S
    assert hooks._window_s() == hooks.DEFAULT_WINDOW_S
    assert 0 < hooks.backoff_s(3, hooks.DEFAULT_WINDOW_S) <= 4.0


@pytest.mark.parametrize("value", ["abc", "1,x", "inf", "-1"])
def test_bad_retry_delays_are_one_line(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LANEWAY_RETRY_DELAYS", value)
    with pytest.raises(LanewayError, match="LANEWAY_RETRY_DELAYS="):
        retry_delays_from_env()


def test_a_tool_call_nested_past_the_parsers_depth_is_a_bad_request() -> None:
    from multiprocessing import Pipe

    ours, theirs = Pipe()
    # past the parser's depth (the interpreter's recursion limit), inside the pipe's buffer
    theirs.send_bytes(b'{"a": ' + b"[" * 5_000 + b"]" * 5_000 + b"}")
    with pytest.raises(ValueError, match="nested too deeply"):
        wire.receive(ours)


def test_the_api_says_the_same_as_the_cli(host: Host) -> None:
    """`POST /api/workflows/import` with a tagged value and `GET /api/tasks/<60,000
    characters>`: a 400 and a 404, each one line (not a 500, not "database unavailable")."""
    with TestClient(build_app(host, token=TOKEN), raise_server_exceptions=False) as client:
        tagged = "id: tagged\nname: Tagged\ncolor: !!timestamp foo\nsteps: []\n"
        answer = client.post("/api/workflows/import", content=tagged.encode(), headers=AUTH)
        assert answer.status_code == 400, answer.text
        assert "a tagged value is not of its tag's type" in answer.json()["error"]
        answer = client.get(f"/api/tasks/{'x' * 60_000}", headers=AUTH)
        assert answer.status_code == 404, answer.text
        assert "(60000 characters)" in answer.json()["error"]
        answer = client.get("/api/tasks", params={"search": "x" * 60_000}, headers=AUTH)
        assert answer.status_code == 400, answer.text
