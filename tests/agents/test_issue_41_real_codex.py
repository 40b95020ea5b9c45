"""Issue 41 item 2: the real Codex agent (`@agentclientprotocol/codex-acp` 2.6 and the `codex`
binary it runs) doing a real turn through a real `laneway worker`, with no credentials and no
network: its model answered by tests/agents/openai_standin.py (the OpenAI Responses API) on
loopback, named as a custom model provider in its CODEX_HOME's config.toml.

`--mode read-only` is Codex's mode that asks before every edit (docs/agents.md): the scripted
model's `apply_patch` waits on the board for a person. The profile is named `claude` only
because the board helper of test_issue_41_real_claude.py names it so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.acp.test_real_adapters import adapter
from tests.agents.conftest import laneway, run_rows
from tests.agents.openai_standin import (
    Call,
    Hold,
    Reply,
    Say,
    Search,
    Standin,
    Status,
    codex_home,
    openai,
    titling,
)
from tests.agents.test_issue_41_real_claude import (
    PROMPT,
    SECOND,
    Claude,
    alive,
    descendants,
    finish,
    reviewer_board,
    workflow_yaml,
)
from tests.conftest import eventually, wait_for_dead_processes

pytestmark = pytest.mark.slow

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from codex\n*** End Patch\n"


def codex(standin: Standin) -> tuple[list[str], Callable[[Path], dict[str, str]]]:
    def env(home: Path) -> dict[str, str]:
        where = codex_home(standin, home / ".codex")
        return {"HOME": str(home), "CODEX_HOME": str(where), "STANDIN_API_KEY": "sk-standin"}

    return [adapter("codex-acp")], env


def outputs(standin: Standin) -> list[str]:
    """The outputs of the tool calls the model was sent back, each once."""
    found: dict[str, str] = {}
    for body in standin.responses():
        for item in body.get("input", []):
            if item.get("type") in ("custom_tool_call_output", "function_call_output"):
                found.setdefault(item["call_id"], json.dumps(item.get("output")))
    return list(found.values())


@pytest.mark.one_database  # the board's side of a permission is proved on both by Claude's
@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_issue_41_item_2_codex_applies_a_patch_only_after_a_person_allows_it(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]], answer: str
) -> None:
    """The scripted model calls `apply_patch` to add hello.txt; codex-acp asks; a separate
    `permission allow|deny` process answers. Allowed: the file is in the task's worktree and
    `task diff` shows it, the model's closing words arrive, the card moves on. Denied:
    nothing is written, the diff is empty, and Codex ends its turn (see below)."""
    with openai([Call("apply_patch", PATCH, custom=True), Say("Patched.")]) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=codex(standin),  # type: ignore[arg-type]
            permissions="ask",
            mode="read-only",
        )
        worker = board.start_worker()
        started.append(worker)
        (asked,) = eventually(board.pending, timeout=90, what="a pending request", every=0.2)
        assert asked["tool_call"]["kind"] == "edit"
        assert not (board.worktree() / "hello.txt").exists()
        board.cli("permission", answer, asked["id"])
        finish(worker)
        assert standin.responses()[0]["model"] == "gpt-5.5"
    diff = board.cli("task", "diff", board.task_id)
    step, session, items = board.read()
    assert session.agent["mode"] == "read-only"
    if answer == "allow":
        assert session.metadata.get("last_agent_error") is None
        assert step == "Done"
        assert "Patched." in [i["text"] for i in items if i["kind"] == "message"]
        assert (board.worktree() / "hello.txt").read_text() == "hello from codex\n"
        assert [(f["path"], f["status"]) for f in diff["files"]] == [("hello.txt", "added")]
        assert "Success" in outputs(standin)[0]
    else:
        assert not (board.worktree() / "hello.txt").exists()
        assert diff["files"] == []
        # Codex's one reject option is `cancel` ("No, and tell Codex what to do
        # differently"): it ends its turn `cancelled`, which laneway did not ask for, so the
        # turn is a failure (R1) as AGENTS.md says, and on_agent_error runs
        assert [o["option_id"] for o in asked["options"]][-1] == "cancel"
        error = session.metadata["last_agent_error"]
        assert (error["route"], step) == ("R1", "Trouble")
        assert "'cancelled' unasked" in error["message"]


@pytest.mark.one_database
def test_issue_41_item_2_codex_comments_and_decides_through_the_tool_server_without_asking(
    db_url: str, tmp_path: Path
) -> None:
    """A reviewer seat under `--permissions ask` and `--mode read-only`: Codex defers MCP tools,
    so the scripted model finds laneway's with its `tool_search` (which finds them only because
    laneway makes codex-acp wait for the tool server before the first prompt), then calls
    `comment` and `decide` in the `mcp__laneway` namespace. Codex asks before each MCP call,
    naming it only by id; laneway recognises its own tool from the call Codex announced and
    allows it at once (issue 41 item 4), so the worker runs to the end with no one answering.
    Review's second reviewer seat, an exec agent, approves too: the card reaches Done only if
    Codex's verdict counted."""
    script: list[Reply] = [
        Search("laneway comment decide"),
        Call("comment", {"text": "The change reads well."}, namespace="mcp__laneway"),
        Call("decide", {"verdict": "approved", "comment": "ship it"}, namespace="mcp__laneway"),
        Say("Approved."),
    ]
    with openai(script) as standin:
        board = reviewer_board(db_url, tmp_path, None, mode="read-only", agent=codex(standin))
        board.work()
    (found,) = {
        item["call_id"]: item
        for body in standin.responses()
        for item in body.get("input", [])
        if item.get("type") == "tool_search_output"
    }.values()
    assert [t["name"] for t in found["tools"]] == ["mcp__laneway"]
    step, _session, items = board.read()
    assert step == "Done"
    assert board.cli("permission", "list") == []  # nothing was put to a person
    asked = [i["data"] for i in items if i["kind"] == "permission"]
    assert [(a["tool_call"]["title"], a["decided_by"]) for a in asked] == [
        ("mcp.laneway.comment", "laneway-tool"),
        ("mcp.laneway.decide", "laneway-tool"),
    ]
    calls = [i["data"] for i in items if i["kind"] == "tool_call"]
    assert [c["rawInput"]["tool"] for c in calls if c.get("rawInput", {}).get("server")] == [
        "comment",
        "decide",
    ]
    comments = board.cli("task", "comments", board.task_id)
    assert [(c["author"], c["body"]) for c in comments] == [("claude", "The change reads well.")]
    verdicts = board.cli("decision", "list", "--task", board.task_id, "--step", "Review", "--all")
    assert sorted((v["decision"], v["comment"]) for v in verdicts) == [
        ("approved", "ship it"),
        ("approved", "the exec reviewer agrees"),
    ]
    assert not any("unsupported call" in o for o in outputs(standin))


@pytest.mark.one_database
def test_issue_41_item_2_a_401_from_the_model_api_is_r3_for_codex(
    db_url: str, tmp_path: Path
) -> None:
    """The stand-in answers 401 (Codex's own retries off in its config): codex-acp answers
    session/prompt with its authentication error, the run fails as R3 at once, on_agent_error
    moves the card to Trouble, and laneway does not retry it (one model request, one prompt)."""
    with openai([Status(401, "Incorrect API key provided: sk-stan***din.")]) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=codex(standin),  # type: ignore[arg-type]
            permissions="allow",
        )
        board.work(env={"LANEWAY_RETRY_DELAYS": "0.1"})
        asked = len(standin.responses())
    step, session, items = board.read()
    error = session.metadata["last_agent_error"]
    assert error["route"] == "R3"
    assert "Authentication required" in error["message"]
    assert step == "Trouble"
    assert [r["status"] for r in run_rows(db_url)] == ["failed"]
    assert len([i for i in items if i["kind"] == "prompt"]) == 1
    assert asked == 1


@pytest.mark.one_database
@pytest.mark.parametrize(
    "busy",
    [
        Status(429, "Too many requests", {"retry-after": "1"}),
        Status(529, "Overloaded"),
    ],
    ids=["429", "529"],
)
def test_issue_41_item_2_a_busy_model_api_takes_the_transient_route_for_codex(
    db_url: str, tmp_path: Path, busy: Status
) -> None:
    """429 (with retry-after) and 529, Codex's own retries off (so the test is bounded):
    codex-acp says the API's error as its closing message and answers `end_turn`; laneway
    takes that turn as transient (R4, not the turn's end), retries the prompt after its
    ladder's delay (LANEWAY_RETRY_DELAYS) with a WARNING, and the second answer finishes the
    run in one attempt. (Codex's words do not carry the retry-after header: laneway's delay is
    the one waited.)"""
    with openai([busy, Say("Done after the retry.")]) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=codex(standin),  # type: ignore[arg-type]
            permissions="allow",
        )
        said = board.work(env={"LANEWAY_RETRY_DELAYS": "0.5"})
        stamps = list(standin.stamps)
    step, session, items = board.read()
    assert step == "Done"
    assert session.metadata.get("last_agent_error") is None
    (run,) = run_rows(db_url)
    assert (run["status"], run["attempts"]) == ("finished", 1)
    assert len(stamps) == 2
    assert stamps[1] - stamps[0] >= 0.5
    assert "transient agent failure; retrying" in said
    messages = [i["text"] for i in items if i["kind"] == "message"]
    assert str(busy.status) in messages[0]
    assert messages[-1] == "Done after the retry."


# The adapter is what this proves; the re-queue after a kill -9 is proven on both databases
# with the fake agent (tests/agents/test_acp_crash.py).
@pytest.mark.one_database
def test_issue_41_item_2_codex_survives_kill_9_of_its_worker_mid_turn(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """A first turn answered; the second turn's model request held by the stand-in; the
    worker killed with SIGKILL: codex-acp, the `codex` app-server it runs and the tool server
    are gone (/proc), `laneway recover` re-queues the run, the next worker takes the same
    conversation up (`session/resume`, which codex-acp offers: `session list --json` says so),
    and the model's next request carries the earlier turn's messages."""
    held = Hold(Say("Held answer, never sent."))
    script: list[Reply] = [Say("First answer: the plan is ready."), held, Say("Second answer.")]
    with openai(script) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=codex(standin),  # type: ignore[arg-type]
            yaml=workflow_yaml(second=True),
            permissions="allow",
        )
        worker = board.start_worker()
        started.append(worker)
        assert held.reached.wait(120), "the second turn never reached the model"
        tree = descendants(worker.pid)
        assert any("codex-acp" in c for c in tree.values()), tree
        assert any("/codex app-server" in c or "codex app-server" in c for c in tree.values()), tree
        assert any("core.agents.tools" in c for c in tree.values()), tree  # the tool server
        os.kill(worker.pid, signal.SIGKILL)
        worker.communicate(timeout=30)
        eventually(
            lambda: not alive(list(tree)), timeout=30, what=f"the agent processes gone: {tree}"
        )
        assert [r["status"] for r in run_rows(db_url)] == ["finished", "claimed"]
        wait_for_dead_processes(db_url)
        recovered = laneway("--db", db_url, "recover", cwd=tmp_path)
        assert recovered.returncode == 0, recovered.stderr
        assert [r["status"] for r in run_rows(db_url)] == ["finished", "queued"]
        before = len(standin.stamps)
        board.work()
        after = [json.dumps(b["input"]) for b in _conversation(standin)[before:]]
    step, _session, items = board.read()
    assert step == "Done"
    assert [(r["status"], r["attempts"]) for r in run_rows(db_url)] == [
        ("finished", 1),
        ("finished", 2),
    ]
    assert after, "the re-run never asked the model"
    assert "First answer: the plan is ready." in after[0]  # the earlier turn, resumed
    assert PROMPT in after[0]
    assert SECOND in after[0]
    assert "Second answer." in [i["text"] for i in items if i["kind"] == "message"]
    assert not [i for i in items if "conversation lost" in i["text"]]
    listed = board.cli("session", "list", "--task", board.task_id)
    assert [s["agent"]["continued_by"] for s in listed] == ["resume"]


def _conversation(standin: Standin) -> list[dict[str, Any]]:
    """The model requests of the conversation (not Codex's title question), in order."""
    return [b for b in standin.responses() if not titling(b)]
