"""Driving the `laneway` command in-process through click's test runner.

`Laneway` runs the real group (the one the console script builds, without asking installed
plugins for extra commands) against one database, and checks the two things every call must
honour: a successful `--json` call prints exactly one JSON value, and a failing one prints
exactly one line on stderr and no traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from core.cli import build_cli


class Laneway:
    def __init__(self, url: str) -> None:
        self.url = url
        self.runner = CliRunner()
        self.cli = build_cli(plugin_commands=False)

    def run(self, *args: str, env: Mapping[str, str] | None = None, db: bool = True) -> Result:
        """`laneway --db URL ARGS...`; global options may precede the command in `args`."""
        argv = (["--db", self.url] if db else []) + list(args)
        # catch_exceptions=False: an exception escaping the command's own error handling is
        # a bug of the command line, and must fail the test loudly.
        return self.runner.invoke(self.cli, argv, env=dict(env or {}), catch_exceptions=False)

    def json(self, *args: str, env: Mapping[str, str] | None = None) -> Any:
        """Run `laneway --db URL --json ARGS...`, which must succeed; its one JSON value."""
        result = self.run("--json", *args, env=env)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    def fails(self, *args: str, code: int = 1, env: Mapping[str, str] | None = None) -> str:
        """Run a command that must fail with `code`; its one stderr line (code 1)."""
        result = self.run(*args, env=env)
        assert result.exit_code == code, (result.stdout, result.stderr)
        assert "Traceback" not in result.output
        if code == 1:
            lines = result.stderr.splitlines()
            assert len(lines) == 1, result.stderr
            assert lines[0].startswith("laneway: ")
            assert result.stdout == ""
            return lines[0]
        return result.stderr


@pytest.fixture(autouse=True)
def _only_builtin_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Like `tests.conftest.open_host`: plugins installed elsewhere must not leak in."""
    monkeypatch.setenv("LANEWAY_PLUGINS_ALLOW", "kanban,office")
    monkeypatch.delenv("LANEWAY_PLUGINS_BLOCK", raising=False)
    monkeypatch.delenv("LANEWAY_DB", raising=False)


@pytest.fixture
def laneway(db_url: str) -> Laneway:
    """An initialised database (SQLite file, and PostgreSQL when available)."""
    lw = Laneway(db_url)
    lw.json("init")
    return lw


@pytest.fixture
def sqlite_laneway(sqlite_url: str) -> Laneway:
    """An initialised SQLite file: for read-side and error tests the dialect does not matter."""
    lw = Laneway(sqlite_url)
    lw.json("init")
    return lw


@pytest.fixture
def fresh_laneway(tmp_path: Path) -> Laneway:
    """A SQLite URL whose file does not exist yet."""
    return Laneway(f"sqlite:///{tmp_path / 'nothing-here.db'}")
