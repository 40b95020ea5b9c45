"""Helpers for the worker, session-message and demo tests.

A `Plain` board (Todo -> Doing -> Done; Todo's on_turn_start moves the card on, so a turn
that starts is visible; no on_enter work, so a finished turn queues nothing behind the test's
back), agents that are tiny Python one-liners, direct row access to the runs table, and the
installed `laneway` console script run as a real process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import ids
from core.agents import spare
from core.host import Host
from core.runs import RunRequest
from core.store import tables as t
from tests import zygote
from tests.conftest import open_host

R = t.runs

PLAIN = textwrap.dedent(
    """\
    id: plain
    name: Plain
    steps:
      - id: todo
        name: Todo
        position: 0
        is_start_step: true
        allow_manual_move: true
        events:
          on_turn_start:
            - type: move_to_next
      - id: doing
        name: Doing
        position: 1
        allow_manual_move: true
      - id: done
        name: Done
        position: 2
        allow_manual_move: true
    """
)


@pytest.fixture(autouse=True)
def _only_builtin_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANEWAY_PLUGINS_ALLOW", "kanban,office")
    monkeypatch.delenv("LANEWAY_PLUGINS_BLOCK", raising=False)
    monkeypatch.delenv("LANEWAY_DB", raising=False)
    monkeypatch.delenv("LANEWAY_FAULT", raising=False)


def plain_workflow(host: Host, tmp_path: Path) -> str:
    path = tmp_path / "plain.yml"
    path.write_text(PLAIN)
    (workflow,) = host.workflows.import_file(path)
    return workflow.id


def session_with_run(
    host: Host, tmp_path: Path, *, profile: str = "agent", title: str = "t"
) -> tuple[str, str, str]:
    """A task on the Plain board with a laneway-run session of an ACP profile `profile` and a
    queued run of it (never started): (task id, session id, run id)."""
    wf = plain_workflow(host, tmp_path)
    agent = host.profiles.add(profile, command=["true"], protocol="acp")
    task = host.tasks.create(workflow=wf, title=title)
    session = host.sessions.start(task.id, profile=profile, external=False)
    run = host.runs.enqueue(
        RunRequest(
            agent_profile_id=agent.id,
            task_id=task.id,
            workflow_step_id=task.workflow_step_id,
            reason="task_assigned",
        )
    )
    return task.id, session.id, run.run_id


def python_agent(code: str) -> list[str]:
    """An agent that runs `code` (which may read the prompt from stdin)."""
    return [sys.executable, "-c", code]


def sleeper(seconds: float) -> list[str]:
    return python_agent(f"import sys, time; sys.stdin.read(); time.sleep({seconds})")


def recorder(path: Path, seconds: float = 0.0, *, meet: int = 0) -> list[str]:
    """An agent that appends `start <t>` and `end <t>` (monotonic-free wall clock) to `path`.
    `meet`: before it ends it also waits (20 s at most) until that many agents have started,
    so agents run side by side always overlap, however late a loaded machine starts one, and
    agents run one after the other never do."""
    code = (
        "import sys, time, os\n"
        "sys.stdin.read()\n"
        f"p = {str(path)!r}\n"
        "run = os.environ['LANEWAY_RUN_ID']\n"
        "open(p, 'a').write(f'start {run} {time.time()}\\n')\n"
        f"time.sleep({seconds})\n"
        "deadline = time.monotonic() + 20\n"
        f"while open(p).read().count('start ') < {meet} and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "open(p, 'a').write(f'end {run} {time.time()}\\n')\n"
    )
    return python_agent(code)


def enqueue(host: Host, agent: str, task: str | None, *, reason: str = "test") -> str:
    """A run that never coalesces with another (each test run stands for itself)."""
    return host.runs.enqueue(
        RunRequest(
            agent_profile_id=agent,
            task_id=task,
            workflow_step_id=host.tasks.get(task).workflow_step_id if task else None,
            reason=reason,
            coalesce_exempt=True,
        )
    ).run_id


def set_run(host: Host, run_id: str, **values: Any) -> None:
    """Put a run into a shape by hand (a crashed worker's claim, an old request, ...), keeping
    its agent's count of claimed runs true, as every real claim and release does."""
    with host.store.transaction() as uow:
        before = uow.conn.execute(
            sa.select(R.c.status, R.c.agent_profile_id).where(R.c.id == run_id)
        ).one()
        uow.conn.execute(sa.update(R).where(R.c.id == run_id).values(**values))
        after = values.get("status", before.status)
        delta = (after == "claimed") - (before.status == "claimed")
        if delta:
            profiles = t.agent_profiles
            uow.conn.execute(
                sa.update(profiles)
                .where(profiles.c.id == before.agent_profile_id)
                .values(claimed_runs=profiles.c.claimed_runs + delta)
            )


def run_rows(url: str) -> list[dict[str, Any]]:
    """The runs table, read on a connection of its own (no host, no lock)."""
    with inspect_host(url) as host, host.store.read() as conn:
        return [dict(r) for r in conn.execute(sa.select(R).order_by(R.c.requested_at)).mappings()]


def inspect_host(url: str) -> Host:
    return open_host(url, read_only=True)


def stamp(offset_s: float) -> str:
    """A timestamp `offset_s` seconds from now, in the store's text form."""
    return ids.format_ts(ids.parse(ids.now()) + timedelta(seconds=offset_s))


# -- the console script -----------------------------------------------------------------------


def laneway_script() -> str:
    beside = Path(sys.executable).with_name("laneway")
    if beside.exists():
        return str(beside)
    found = shutil.which("laneway")
    if found is None:
        pytest.skip("the laneway console script is not installed (pip install -e .)")
    return found


def script_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LANEWAY_DB", "LANEWAY_PLUGINS_BLOCK", "LANEWAY_FAULT")
    }
    environ["LANEWAY_PLUGINS_ALLOW"] = "kanban,office"
    environ.update(extra or {})
    return environ


def laneway(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    # a process of its own, forked from a warm one (tests/zygote.py)
    return zygote.run(args, cwd=cwd, env=script_env(env), timeout=timeout)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts; any still running at the end are killed (by their own id)."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def handed_jobs(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], None]]:
    """Every job handed to another thread (`core.agents.spare.run`) while the test runs, in
    order; each still runs."""
    handed: list[Callable[[], None]] = []
    real = spare.run

    def run(job: Callable[[], None]) -> None:
        handed.append(job)
        real(job)

    monkeypatch.setattr(spare, "run", run)
    return handed
