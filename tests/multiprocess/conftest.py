"""Real processes sharing one board: `laneway` commands, workers and hosts side by side."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from core.store import tables as t
from tests import zygote

LANEWAY = str(Path(sys.executable).with_name("laneway"))
T = TypeVar("T")


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office"}
    for name in ("LANEWAY_PLUGINS_BLOCK", "LANEWAY_FAULT", "LANEWAY_DB"):
        env.pop(name, None)
    env.update(extra or {})
    return env


class Board:
    """`laneway --db URL ...` as a separate process each time."""

    def __init__(self, url: str, cwd: Path) -> None:
        self.url = url
        self.cwd = cwd

    def run(
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        # a process of its own, forked from a warm one (tests/zygote.py)
        return zygote.run(["--db", self.url, *args], cwd=self.cwd, env=child_env(env), timeout=120)

    def json(self, *args: str, env: Mapping[str, str] | None = None) -> Any:
        done = self.run("--json", *args, env=env)
        assert done.returncode == 0, f"laneway {' '.join(args)}: {done.stderr}"
        return json.loads(done.stdout)

    def spawn(
        self, *args: str, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> subprocess.Popen[str]:
        out = open(log, "a") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        return subprocess.Popen(
            [LANEWAY, "--db", self.url, *args],
            cwd=self.cwd,
            env=child_env(env),
            stdout=out,
            stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
            text=True,
        )


@pytest.fixture
def board(db_url: str, tmp_path: Path) -> Iterator[Board]:
    b = Board(db_url, tmp_path)
    b.json("init")
    return b


def task_moves(conn: Any, task: str) -> tuple[int, str]:
    """How many times `task` was moved (its `task.moved` events) and the step it stands at."""
    moves = conn.execute(
        sa.select(sa.func.count())
        .select_from(t.board_events)
        .where(t.board_events.c.task_id == task, t.board_events.c.type == "task.moved")
    ).scalar()
    at = conn.execute(sa.select(t.tasks.c.workflow_step_id).where(t.tasks.c.id == task)).scalar()
    return int(moves), str(at)


def log_records(log: Path) -> list[dict[str, Any]]:
    """The loguru records of a `--log-format json` log file (other lines skipped)."""
    out = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line)["record"])
    return out
