"""Issue 43 item 4 (tests: "the real claude adapter still does its scripted turn inside the
sandbox"): the real Claude Code agent (`@agentclientprotocol/claude-agent-acp` and the
`claude` binary it runs) under `profile --sandbox bwrap`, driven by a real `laneway worker`,
its model answered by tests/agents/anthropic_standin.py on loopback (no credentials, no
network). The adapter is found as tests/acp/test_real_adapters.py finds it.

The profile's environment names no HOME and no CLAUDE_CONFIG_DIR (unlike issue 41's tests):
the adapter keeps its files in the `~/.claude` of whatever home it is given, so where they land
shows which home the sandbox gave it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from core.agents.sandbox import HOMES
from tests.acp.test_real_adapters import adapter
from tests.agents.anthropic_standin import Standin, Text, anthropic, environment
from tests.agents.conftest import run_rows
from tests.agents.test_issue_41_real_claude import PROMPT, Claude, write_script

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap (Debian: bubblewrap)"),
]


def boxed_claude(
    standin: Standin, **more: str
) -> tuple[list[str], Callable[[Path], dict[str, str]]]:
    """Claude's command and an environment without a home of the test's choosing."""
    command = [adapter("claude-agent-acp")]

    def env(_home: Path) -> dict[str, str]:
        given = environment(standin, "/nonexistent", **more)
        return {k: v for k, v in given.items() if k not in ("HOME", "CLAUDE_CONFIG_DIR")}

    return command, env


def test_issue_43_item_4_the_real_claude_adapter_does_its_scripted_turn_in_the_sandbox(
    db_url: str, tmp_path: Path
) -> None:
    """`--sandbox bwrap --network on`: network on because the stand-in listens on the worker's
    loopback, which an agent in its own network namespace (`--network off`) cannot reach. Under
    `--mode acceptEdits` the scripted model's Write goes through without asking; the file lands
    in the task's worktree (the one place in the room it may write besides its home and temp
    directories) and `task diff` shows it; the card moves on. The adapter's own files
    (`~/.claude`: its settings and the saved conversation) are in the task's sandbox home
    (`LANEWAY_WORKTREES/.homes/<task>`), and the worker's HOME holds nothing of the agent's."""
    worker_home = tmp_path / "worker-home"
    worker_home.mkdir()
    with anthropic(write_script()) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=boxed_claude(standin),
            permissions="ask",
            mode="acceptEdits",
            sandbox="bwrap",
            network="on",
        )
        board.work(env={"HOME": str(worker_home)})
        asked = standin.conversation()
        assert standin.strays == []
    assert asked
    assert asked[0].said(PROMPT)
    # laneway's tool server started in the room too (its socket exposed): the model is offered
    # its tools
    assert asked[0].said("mcp__laneway__comment")
    worktree = board.worktree()
    assert (worktree / "hello.txt").read_text() == "hello from claude\n"
    diff = board.cli("task", "diff", board.task_id)
    assert [(f["path"], f["status"]) for f in diff["files"]] == [("hello.txt", "added")]
    assert "+hello from claude" in diff["patch"]
    step, session, items = board.read()
    assert step == "Done"
    assert session.agent["mode"] == "acceptEdits"
    assert "Wrote it." in [i["text"] for i in items if i["kind"] == "message"]
    assert board.cli("permission", "list") == []
    assert [r["status"] for r in run_rows(db_url)] == ["finished"]
    # the adapter's own files: in the task's home, none in the worker's
    own = tmp_path / "worktrees" / HOMES / board.task_id / ".claude"
    assert own.is_dir()
    saved = list((own / "projects").rglob("*.jsonl"))
    assert saved, sorted(str(p.relative_to(own)) for p in own.rglob("*"))
    assert any("hello from claude" in p.read_text() for p in saved)
    assert list(worker_home.iterdir()) == []


@pytest.mark.one_database
def test_issue_43_item_4_the_real_claude_adapter_cannot_reach_its_model_with_network_off(
    db_url: str, tmp_path: Path
) -> None:
    """`--sandbox bwrap --network off`: the agent's network namespace has only its own
    loopback, so the stand-in on the worker's loopback is refused at once (nothing listens on
    that port inside). With Claude Code's own retries off (CLAUDE_CODE_MAX_RETRIES=0; it backs
    off for minutes otherwise) the turn ends in bounded time as AGENTS.md's "any other error":
    a terminal failure (R1) naming the refused connection, on_agent_error moves the card to
    Trouble, and the model was never asked. (docs/agents.md says how such an agent reaches
    its model API: a proxy on a path the room can see.)"""
    with anthropic([Text("never said")]) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=boxed_claude(standin, CLAUDE_CODE_MAX_RETRIES="0"),
            permissions="allow",
            sandbox="bwrap",
            network="off",
        )
        board.work(env={"LANEWAY_RETRY_DELAYS": "0.1"})
        asked = standin.conversation()
    assert asked == []
    step, session, items = board.read()
    assert any("ECONNREFUSED" in i["text"] for i in items if i["kind"] == "message")
    error = session.metadata["last_agent_error"]
    assert error["route"] == "R1"
    assert "Connection refused" in error["message"]
    assert step == "Trouble"
    assert [r["status"] for r in run_rows(db_url)] == ["failed"]
