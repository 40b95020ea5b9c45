"""Issue 43 item 5: `workflow set W --setup CMD` runs in a task's new worktree before its first
turn (under the profile's sandbox), its output kept as transcript items within exec's bounds;
a setup that fails or hangs ends the turn R2 with its last lines and the agent never starts;
`--cleanup CMD` runs in the worktree before it is removed. A real `laneway worker` and exec
agents, a real git repository, on SQLite (what setup does is the same on either database)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.agents.item_queue import TURN_ITEMS
from core.services.worktrees import retire
from core.store import tables as t
from core.text import MAX_TEXT
from tests.agents.conftest import (
    enqueue,
    laneway,
    laneway_script,
    plain_workflow,
    python_agent,
    script_env,
)
from tests.agents.test_worktrees import make_repo
from tests.conftest import open_host

pytestmark = [pytest.mark.slow, pytest.mark.one_database]

FAKE = str(Path(__file__).resolve().with_name("fake_acp_agent.py"))
MIB = 1024 * 1024
SLACK = 48 * MIB
"""What a worker's peak memory may grow by over a quiet setup's (10 MB printed must not be
held: a worker that held it would grow by more than that, twice over as text)."""

AGENT = python_agent(
    "import os, sys\nsys.stdin.read()\nopen('agent-ran', 'a').write('turn\\n')\nprint('agent done')"
)


class Board:
    """A Plain board whose workflow works in a repository, one profile `agent`, tasks on it."""

    def __init__(self, url: str, tmp_path: Path, **profile: Any) -> None:
        self.url = url
        self.tmp_path = tmp_path
        self.repo = make_repo(tmp_path / "repo")
        self.env = {"LANEWAY_WORKTREES": str(tmp_path / "wt"), "LANEWAY_RETRY_DELAYS": "0.1"}
        with open_host(url) as host:
            self.wf = plain_workflow(host, tmp_path)
            host.workflows.set_repository(self.wf, str(self.repo), "main")
            self.profile = host.profiles.add("agent", **{"command": AGENT, **profile}).id

    def cli(self, *args: str) -> Any:
        done = laneway("--db", self.url, "--json", *args, cwd=self.tmp_path, env=self.env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def task(self, title: str) -> str:
        with open_host(self.url) as host:
            task = host.tasks.create(workflow=self.wf, title=title)
            host.sessions.start(task.id, profile="agent", external=False)
            return task.id

    def turn(self, task_id: str) -> int:
        """One run of the task's agent by a worker of its own; the worker's peak RSS."""
        with open_host(self.url) as host:
            enqueue(host, self.profile, task_id)
        proc = subprocess.Popen(
            [laneway_script(), "--db", self.url, "worker", "--once"],
            cwd=self.tmp_path,
            env=script_env(self.env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        peak = 0
        while proc.poll() is None:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
            except FileNotFoundError:
                break
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
            time.sleep(0.05)
        _out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        return peak

    def read(self, task_id: str) -> tuple[Path, Any, list[Any]]:
        """The task's worktree, its session, and the session's transcript."""
        with open_host(self.url) as host:
            task = host.tasks.get(task_id)
            (session,) = host.sessions.list(task=task_id)
            items = host.sessions.items(session.id, limit=1000)
        assert task.workspace is not None
        return Path(task.workspace["path"]), session, items


def test_issue_43_item_5_workflow_set_setup_and_cleanup_on_the_command_line(
    db_url: str, tmp_path: Path
) -> None:
    board = Board(db_url, tmp_path)
    shown = board.cli("workflow", "set", board.wf, "--setup", "npm ci", "--cleanup", "make clean")
    assert (shown["setup"], shown["cleanup"]) == ("npm ci", "make clean")
    shown = board.cli("workflow", "set", board.wf, "--setup", "")
    assert (shown["setup"], shown["cleanup"]) == (None, "make clean")
    assert board.cli("workflow", "show", board.wf)["cleanup"] == "make clean"


def test_issue_43_item_5_setup_runs_once_in_a_new_worktree_before_the_first_turn_sandboxed(
    db_url: str, tmp_path: Path
) -> None:
    """The setup runs in the worktree before the agent, once: a later turn finds it done; it
    runs in the profile's sandbox (the worker's home is not there); its output is the
    turn's transcript."""
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap (Debian: bubblewrap)")
    board = Board(db_url, tmp_path, sandbox="bwrap")
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret").write_text("the worker's")
    board.env["HOME"] = str(home)
    setup = (
        "echo installing; test -e agent-ran && echo 'agent ran first'; echo once >> setup-ran; "
        f"cat {home / 'secret'} || echo 'no home of the worker here'"
    )
    board.cli("workflow", "set", board.wf, "--setup", setup)
    task = board.task("with setup")
    board.turn(task)
    board.turn(task)
    worktree, session, items = board.read(task)
    assert (worktree / "setup-ran").read_text() == "once\n"
    assert (worktree / "agent-ran").read_text() == "turn\nturn\n"
    said = [i.text for i in items if i.kind == "output"]
    assert said[0] == "installing"
    assert said[1].endswith(f"{home / 'secret'}: No such file or directory")
    assert said[2] == "no home of the worker here"
    assert "agent ran first" not in said
    assert said.count("agent done") == 2
    assert next(i.text for i in items if i.kind == "log") == f"setup: {setup}"
    assert session.state == "WAITING_FOR_INPUT"
    # setup-ran is the setup's own file, in the checkout; its mark is in git's directory
    assert not (worktree / "laneway-setup").exists()


def test_issue_43_item_5_a_setup_that_fails_ends_the_turn_r2_with_its_last_lines(
    db_url: str, tmp_path: Path
) -> None:
    board = Board(db_url, tmp_path)
    setup = (
        "echo 'npm ci'; echo 'npm ERR! code ENOENT' >&2; "
        "echo 'npm ERR! missing package.json' >&2; exit 3"
    )
    board.cli("workflow", "set", board.wf, "--setup", setup)
    task = board.task("setup fails")
    board.turn(task)
    worktree, session, items = board.read(task)
    error = session.metadata["last_agent_error"]
    assert error["route"] == "R2"
    assert error["message"] == (
        "setup exited with status 3: npm ci | npm ERR! code ENOENT | npm ERR! missing package.json"
    )
    assert not (worktree / "agent-ran").exists()  # the agent never started
    assert "npm ERR! missing package.json" in [i.text for i in items if i.kind == "output"]
    # not marked done: the next turn runs it again
    board.cli("workflow", "set", board.wf, "--setup", "echo fixed")
    board.turn(task)
    _worktree, _session, items = board.read(task)
    assert "echo fixed" not in [i.text for i in items if i.kind == "output"]
    assert "fixed" in [i.text for i in items if i.kind == "output"]
    assert (worktree / "agent-ran").read_text() == "turn\n"


def test_issue_43_item_5_a_setup_that_hangs_is_ended_by_the_turn_timeout(
    db_url: str, tmp_path: Path
) -> None:
    board = Board(db_url, tmp_path, turn_timeout=2.0)
    board.cli("workflow", "set", board.wf, "--setup", "echo waiting; sleep 600")
    task = board.task("setup hangs")
    board.turn(task)
    worktree, session, _items = board.read(task)
    error = session.metadata["last_agent_error"]
    assert (error["route"], error["message"]) == (
        "R2",
        "setup turn timed out after 2 s: waiting",
    )
    assert not (worktree / "agent-ran").exists()


def test_issue_43_item_5_a_setup_that_prints_10_mb_costs_bounded_memory_and_transcript(
    db_url: str, tmp_path: Path
) -> None:
    """10 MB in 100-byte lines and one 10 MB line: the worker's peak memory stays within a
    quiet setup's plus a slack smaller than what was printed; the transcript keeps at most
    the turn's item bound, each item within its text bound."""
    board = Board(db_url, tmp_path)
    board.cli("workflow", "set", board.wf, "--setup", "echo quiet")
    quiet = board.turn(board.task("quiet"))
    loud = (
        "python3 -c \"import sys; [sys.stdout.write('x' * 99 + '\\n') for _ in range(100_000)]\"; "
        "head -c 10000000 /dev/zero | tr '\\0' 'y'; echo"
    )
    board.cli("workflow", "set", board.wf, "--setup", loud)
    task = board.task("loud")
    peak = board.turn(task)
    assert peak < quiet + SLACK, (peak, quiet)
    _worktree, session, _items = board.read(task)
    items = t.transcript_items
    with open_host(db_url) as host, host.store.read() as conn:
        count, chars = conn.execute(
            sa.select(
                sa.func.count(), sa.func.coalesce(sa.func.sum(sa.func.length(items.c.text)), 0)
            ).where(items.c.session_id == session.id)
        ).one()
    assert count <= TURN_ITEMS + 10
    assert chars < (TURN_ITEMS + 10) * MAX_TEXT
    assert chars < 10 * MIB  # not what was printed


def test_issue_43_item_5_cleanup_runs_in_the_worktree_before_it_is_removed(
    db_url: str, tmp_path: Path
) -> None:
    board = Board(db_url, tmp_path)
    record = tmp_path / "cleaned"
    board.cli("workflow", "set", board.wf, "--cleanup", f"ls > {record}; pwd >> {record}")
    task = board.task("cleaned up")
    board.turn(task)
    worktree, _session, _items = board.read(task)
    board.cli("task", "archive", task)
    assert not worktree.exists()
    listed = record.read_text().splitlines()
    assert "agent-ran" in listed  # it ran in the worktree, before it was removed
    assert listed[-1] == str(worktree)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap (Debian: bubblewrap)")
def test_issue_43_item_5_a_sandboxed_agents_cleanup_runs_in_its_room(
    db_url: str, tmp_path: Path
) -> None:
    """A cleanup such as `sh clean.sh` runs the worktree's own files, which a sandboxed agent
    wrote: it runs in that agent's room (its home the task's, the worker's hidden, nothing
    outside written), not as the worker."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret").write_text("the worker's")
    escaped = tmp_path / "escaped"
    board = Board(db_url, tmp_path, sandbox="bwrap")
    board.env["HOME"] = str(home)
    board.cli("workflow", "set", board.wf, "--cleanup", "sh clean.sh")
    task = board.task("boxed")
    board.turn(task)
    worktree, _session, _items = board.read(task)
    (worktree / "clean.sh").write_text(  # what the agent could have written
        f"echo out > {escaped}\n"
        'cat "$HOME/secret" > "$HOME/copied" 2>/dev/null\n'
        'echo ran > "$HOME/cleanup-ran"\n'
    )
    board.cli("task", "archive", task)
    assert not worktree.exists()
    own_home = tmp_path / "wt" / ".homes" / task
    assert (own_home / "cleanup-ran").read_text() == "ran\n"
    assert not escaped.exists()
    copied = own_home / "copied"  # the shell makes it before `cat` is refused the secret
    assert not copied.exists() or copied.read_text() == ""
    assert not (home / "cleanup-ran").exists()


def test_issue_43_item_5_a_worktree_made_anew_runs_its_setup_again(
    db_url: str, tmp_path: Path
) -> None:
    """The setup's mark lives in the worktree's own git directory: a worktree retired and made
    again from its branch (as one re-created on another machine is) runs the setup again."""
    board = Board(db_url, tmp_path)
    board.cli("workflow", "set", board.wf, "--setup", "echo once >> setup-ran")
    task = board.task("made twice")
    board.turn(task)
    worktree, _session, _items = board.read(task)
    assert (worktree / "setup-ran").read_text() == "once\n"
    with open_host(db_url) as host:
        retire(host.store, host.tasks.get(task), "done")
    assert not worktree.exists()
    board.turn(task)
    # the retirement committed the first run's file to the branch; the new worktree ran it again
    assert (worktree / "setup-ran").read_text() == "once\nonce\n"
    assert (worktree / "agent-ran").read_text() == "turn\nturn\n"


def test_issue_43_item_5_an_acp_agents_worktree_is_set_up_before_its_conversation(
    db_url: str, tmp_path: Path
) -> None:
    """Setup is the turn's, not the protocol's: an ACP agent (the fake one) finds the file
    the setup made when its conversation's first prompt comes."""
    script = {"turns": [[{"python": "result = open('prepared').read().strip()"}]]}
    board = Board(
        db_url,
        tmp_path,
        command=[sys.executable, FAKE],
        protocol="acp",
        env={"FAKE_ACP_SCRIPT": json.dumps(script)},
    )
    board.cli("workflow", "set", board.wf, "--setup", "echo ready > prepared; echo prepared it")
    task = board.task("acp")
    board.turn(task)
    _worktree, session, items = board.read(task)
    said = [(i.kind, i.text) for i in items]
    assert ("output", "prepared it") in said
    assert any(kind == "message" and "python: ready" in text for kind, text in said), said
    assert session.state == "WAITING_FOR_INPUT"
