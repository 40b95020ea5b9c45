"""The installed `laneway` console script, run as a real process: exit codes, one-line errors,
no traceback, LANEWAY_DB, the default database in the working directory, and a second
writer refused while this test process owns the database."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.conftest import open_host

pytestmark = pytest.mark.slow


def _script() -> str:
    # The script installed beside this interpreter (a virtualenv's bin/), else on PATH.
    beside = Path(sys.executable).with_name("laneway")
    if beside.exists():
        return str(beside)
    found = shutil.which("laneway")
    if found is None:
        pytest.skip("the laneway console script is not installed (pip install -e .)")
    return found


def laneway(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LANEWAY_DB", "LANEWAY_PLUGINS_BLOCK", "LANEWAY_FAULT")
    }
    environ["LANEWAY_PLUGINS_ALLOW"] = "kanban,office"
    environ.update(env or {})
    return subprocess.run(
        [_script(), *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("laneway: ")
    return lines[0]


def test_exit_codes_and_one_line_errors(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    line = assert_one_line_error(laneway("--db", db, "task", "list", cwd=tmp_path))
    assert "run `laneway init`" in line
    init = laneway("--db", db, "--json", "init", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    assert json.loads(init.stdout)["database"] == db
    line = assert_one_line_error(laneway("--db", db, "task", "show", "nope", cwd=tmp_path))
    assert "no task 'nope'" in line
    usage = laneway("--db", db, "no-such-command", cwd=tmp_path)
    assert usage.returncode == 2
    assert "Traceback" not in usage.stderr
    ok = laneway("--db", db, "--json", "workflow", "templates", cwd=tmp_path)
    assert ok.returncode == 0
    assert ok.stderr == ""
    assert {t["id"] for t in json.loads(ok.stdout)} >= {"office-default", "simple"}


def test_laneway_db_env_and_the_default_database_in_the_cwd(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    url = f"sqlite:///{elsewhere / 'env.db'}"
    init = laneway("--json", "init", cwd=tmp_path, env={"LANEWAY_DB": url})
    assert init.returncode == 0, init.stderr
    assert json.loads(init.stdout)["database"] == url
    assert (elsewhere / "env.db").exists()
    assert not (tmp_path / "laneway.db").exists()
    created = laneway(
        "--json", "workflow", "create", "--template", "simple",
        cwd=tmp_path, env={"LANEWAY_DB": url},
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    # --db wins over the environment.
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert laneway("--db", other, "init", cwd=tmp_path, env={"LANEWAY_DB": url}).returncode == 0
    listed = laneway("--db", other, "--json", "workflow", "list", cwd=tmp_path)
    assert json.loads(listed.stdout) == []
    # Neither: laneway.db in the working directory.
    default = laneway("--json", "init", cwd=tmp_path)
    assert default.returncode == 0, default.stderr
    assert json.loads(default.stdout)["database"] == "sqlite:///laneway.db"
    assert (tmp_path / "laneway.db").exists()


def test_a_second_writer_works_beside_a_live_host(db_url: str, tmp_path: Path) -> None:
    """Many processes, one board: a command writes while another process holds a host open
    (before, it was refused with "database is owned by another laneway process")."""
    with open_host(db_url) as host:
        wf = host.workflows.create_from_template("simple")
        created = laneway(
            "--db", db_url, "--json", "task", "create", "--workflow", wf.id, "--title", "t",
            cwd=tmp_path,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        task = json.loads(created.stdout)
        # The open host sees the other process's write at once.
        assert host.tasks.get(task["id"]).title == "t"
        listed = laneway("--db", db_url, "--json", "task", "list", cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        assert [t["id"] for t in json.loads(listed.stdout)] == [task["id"]]


def test_log_json_lines_on_stderr(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    proc = laneway("--db", db, "--log-json", "-v", "--json", "init", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)) == {"database", "revision"}
    records = [json.loads(line)["record"] for line in proc.stderr.splitlines()]
    assert records
    assert {"DEBUG", "INFO"} <= {r["level"]["name"] for r in records}


def test_an_unopenable_database_is_one_line_without_traceback(tmp_path: Path) -> None:
    # A directory where the SQLite file should be: SQLite itself refuses to open it.
    (tmp_path / "dir.db").mkdir()
    db = f"sqlite:///{tmp_path / 'dir.db'}"
    proc = laneway("--db", db, "init", cwd=tmp_path)
    line = assert_one_line_error(proc)
    assert "dir.db" in line or "database" in line
