"""Issue 41 item 2: the real OpenCode agent (`opencode acp`, npm `opencode-ai`, its binary inside
the package) doing a real turn through a real `laneway worker`, with no credentials and no
network: its model answered by tests/agents/chat_standin.py (OpenAI chat completions) on
loopback, named as a provider with `options.baseURL` in the opencode.json its environment
points at.

OpenCode asks before an edit when its `permission` config says `edit: ask` (docs/agents.md);
its `build` mode then asks. The profile is named `claude` only because the board helper of
test_issue_41_real_claude.py names it so.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.acp.test_real_adapters import adapter
from tests.agents.chat_standin import Call, Hold, Reply, Say, Standin, Status, chat, opencode_env
from tests.agents.conftest import laneway, run_rows
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


def opencode(
    standin: Standin, **permission: str
) -> tuple[list[str], Callable[[Path], dict[str, str]]]:
    def env(home: Path) -> dict[str, str]:
        return opencode_env(standin, home, **permission)

    return [adapter("opencode", "opencode-ai"), "acp"], env


def in_workdir(name: str, content: str) -> Callable[[Mapping[str, Any]], Mapping[str, Any]]:
    """The write tool's arguments for `name` in the working directory OpenCode told the model
    about in its system prompt (the task's worktree)."""

    def make(body: Mapping[str, Any]) -> Mapping[str, Any]:
        text = " ".join(str(m.get("content")) for m in body["messages"] if m["role"] == "system")
        found = re.search(r"Working directory: (\S+)", text)
        assert found is not None, "OpenCode told the model no working directory"
        return {"filePath": str(Path(found.group(1), name)), "content": content}

    return make


def tool_outputs(standin: Standin) -> list[str]:
    """The tool results the model was sent, each once."""
    found: dict[str, str] = {}
    for body in standin.turns():
        for message in body["messages"]:
            if message["role"] == "tool":
                found.setdefault(message["tool_call_id"], str(message.get("content")))
    return list(found.values())


@pytest.mark.one_database  # the board's side of a permission is proved on both by Claude's
@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_issue_41_item_2_opencode_writes_a_file_only_after_a_person_allows_it(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]], answer: str
) -> None:
    """The scripted model calls OpenCode's `write` for hello.txt; OpenCode asks; a separate
    `permission allow|deny` process answers. Allowed: the file is in the task's worktree,
    `task diff` shows it, the model's closing words arrive, the card moves on. Denied: nothing
    is written and the diff is empty."""
    script = [Call("write", in_workdir("hello.txt", "hello from opencode\n")), Say("Written.")]
    with chat(script) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=opencode(standin, edit="ask"),
            permissions="ask",
            mode="build",
        )
        worker = board.start_worker()
        started.append(worker)
        (asked,) = eventually(board.pending, timeout=120, what="a pending request", every=0.2)
        assert asked["tool_call"]["kind"] == "edit"
        assert not (board.worktree() / "hello.txt").exists()
        board.cli("permission", answer, asked["id"])
        finish(worker, timeout=180)
        assert standin.strays() == []
        assert standin.turns()[0]["model"] == "standin-coder"
    diff = board.cli("task", "diff", board.task_id)
    step, session, items = board.read()
    assert session.agent["mode"] == "build"
    if answer == "allow":
        assert session.metadata.get("last_agent_error") is None
        assert step == "Done"
        assert "Written." in [i["text"] for i in items if i["kind"] == "message"]
        assert (board.worktree() / "hello.txt").read_text() == "hello from opencode\n"
        assert [(f["path"], f["status"]) for f in diff["files"]] == [("hello.txt", "added")]
        assert "Wrote file successfully" in tool_outputs(standin)[0]
    else:
        assert not (board.worktree() / "hello.txt").exists()
        assert diff["files"] == []
        # OpenCode ends its turn at a rejected permission (`end_turn`, the model is not
        # called again): the turn ended, the card moves on
        assert session.metadata.get("last_agent_error") is None
        assert step == "Done"
        assert tool_outputs(standin) == []


@pytest.mark.one_database
def test_issue_41_item_2_opencode_takes_the_profiles_plan_mode_and_writes_nothing(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """`--mode plan`: OpenCode 1.18 offers its modes (`build`, `plan`) only as a config
    option of category `mode`, and laneway sets it through that option before the first
    prompt. In `plan` (and no `permission` config: OpenCode's `edit: ask` would override the
    mode and ask) OpenCode refuses the scripted model's edit on its own: no person is asked,
    nothing is written, the model is told."""
    script = [Call("write", in_workdir("hello.txt", "hello from opencode\n")), Say("Planned.")]
    with chat(script) as standin:
        board = Claude(
            db_url, tmp_path, None, agent=opencode(standin), permissions="ask", mode="plan"
        )
        worker = board.start_worker()
        started.append(worker)
        finish(worker, timeout=180)
        assert standin.strays() == []
    step, session, _items = board.read()
    assert session.agent["mode"] == "plan"
    assert session.agent["warned"] == []
    assert board.cli("permission", "list") == []
    assert not (board.worktree() / "hello.txt").exists()
    assert board.cli("task", "diff", board.task_id)["files"] == []
    (told,) = tool_outputs(standin)
    assert "prevents you from using this specific tool call" in told
    assert step == "Done"


@pytest.mark.one_database
def test_issue_41_item_2_opencode_comments_and_decides_through_the_tool_server_without_asking(
    db_url: str, tmp_path: Path
) -> None:
    """A reviewer seat under `--permissions ask`, OpenCode configured to ask before every tool
    (`permission: {"*": "ask"}`): the scripted model calls laneway's `comment` and `decide`
    (OpenCode names an MCP server's tools `laneway_comment`, `laneway_decide`); OpenCode asks,
    laneway allows its own tools at once (issue 41 item 4), so the worker runs to the end with
    no one answering and the transcript shows each call and its permission. Review's second
    reviewer seat, an exec agent, approves too: the card reaches Done only if OpenCode's
    verdict counted."""
    script = [
        Call("laneway_comment", {"text": "The change reads well."}),
        Call("laneway_decide", {"verdict": "approved", "comment": "ship it"}),
        Say("Approved."),
    ]
    with chat(script) as standin:
        board = reviewer_board(
            db_url, tmp_path, None, mode="build", agent=opencode(standin, **{"*": "ask"})
        )
        board.work()
        assert standin.strays() == []
    step, _session, items = board.read()
    assert step == "Done"
    assert board.cli("permission", "list") == []  # nothing was put to a person
    asked = [i["data"] for i in items if i["kind"] == "permission"]
    assert [(a["tool_call"]["title"], a["decided_by"]) for a in asked] == [
        ("laneway_comment", "laneway-tool"),
        ("laneway_decide", "laneway-tool"),
    ]
    calls = [i["data"] for i in items if i["kind"] == "tool_call" and i["data"].get("rawInput")]
    assert [(c["title"], c["rawInput"]) for c in calls] == [
        ("laneway_comment", {"text": "The change reads well."}),
        ("laneway_decide", {"verdict": "approved", "comment": "ship it"}),
    ]
    comments = board.cli("task", "comments", board.task_id)
    assert [(c["author"], c["body"]) for c in comments] == [("claude", "The change reads well.")]
    verdicts = board.cli("decision", "list", "--task", board.task_id, "--step", "Review", "--all")
    assert sorted((v["decision"], v["comment"]) for v in verdicts) == [
        ("approved", "ship it"),
        ("approved", "the exec reviewer agrees"),
    ]


@pytest.mark.one_database
def test_issue_41_item_2_a_401_from_the_model_api_is_r3_for_opencode(
    db_url: str, tmp_path: Path
) -> None:
    """The stand-in answers 401 with the OpenAI API's words for a refused key: OpenCode answers
    session/prompt -32603 with those words and no status, laneway takes them as R3 (not R1),
    on_agent_error moves the card to Trouble, and the turn is not retried."""
    refused = Status(401, "Incorrect API key provided: sk-stan***din.")
    with chat([refused]) as standin:
        board = Claude(
            db_url, tmp_path, None, agent=opencode(standin), permissions="allow", mode="build"
        )
        board.work(env={"LANEWAY_RETRY_DELAYS": "0.1"})
        asked = len(standin.turns())
    step, session, items = board.read()
    error = session.metadata["last_agent_error"]
    assert error["route"] == "R3"
    assert "Incorrect API key provided" in error["message"]
    assert step == "Trouble"
    assert [r["status"] for r in run_rows(db_url)] == ["failed"]
    assert len([i for i in items if i["kind"] == "prompt"]) == 1
    assert asked == 1


@pytest.mark.one_database
def test_issue_41_item_2_opencode_retries_a_busy_model_api_itself(
    db_url: str, tmp_path: Path
) -> None:
    """429 with retry-after: 1, then 529: OpenCode retries a busy provider itself, honouring
    the retry-after the API named (docs/agents.md), and never ends the turn with an error
    laneway could route, so laneway's own transient route is not taken: the third request is
    answered and the run finishes in one attempt, in bounded time, with no laneway retry."""
    busy = [
        Status(429, "Too many requests", {"retry-after": "1"}),
        Status(529, "Overloaded"),
        Say("Done after the retry."),
    ]
    with chat(busy) as standin:
        board = Claude(
            db_url, tmp_path, None, agent=opencode(standin), permissions="allow", mode="build"
        )
        said = board.work(env={"LANEWAY_RETRY_DELAYS": "0.5"})
        stamps = list(standin.stamps)
    step, session, items = board.read()
    assert step == "Done"
    assert session.metadata.get("last_agent_error") is None
    (run,) = run_rows(db_url)
    assert (run["status"], run["attempts"]) == ("finished", 1)
    assert len(stamps) == 3
    assert stamps[1] - stamps[0] >= 1.0  # the retry-after the API named
    assert "transient agent failure" not in said
    assert len([i for i in items if i["kind"] == "prompt"]) == 1
    assert [i["text"] for i in items if i["kind"] == "message"][-1] == "Done after the retry."


@pytest.mark.one_database  # OpenCode's start is slow; the board's side is proved on both
def test_issue_41_item_2_opencode_survives_kill_9_of_its_worker_mid_turn(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """A first turn answered; the second turn's model request held by the stand-in; the
    worker killed with SIGKILL: `opencode acp` and the tool server are gone (/proc), `laneway
    recover` re-queues the run, the next worker takes the same conversation up (`session list
    --json` says how) and the model's next request carries the earlier turn's messages."""
    held = Hold(Say("Held answer, never sent."))
    script: list[Reply] = [Say("First answer: the plan is ready."), held, Say("Second answer.")]
    with chat(script) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=opencode(standin),
            yaml=workflow_yaml(second=True),
            permissions="allow",
            mode="build",
        )
        worker = board.start_worker()
        started.append(worker)
        assert held.reached.wait(180), "the second turn never reached the model"
        tree = descendants(worker.pid)
        assert any(" acp" in c and "opencode" in c for c in tree.values()), tree
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
        before = len(standin.turns())
        board.work()
        after = [json.dumps(b["messages"]) for b in standin.turns()[before:]]
    step, _session, items = board.read()
    assert step == "Done"
    assert [(r["status"], r["attempts"]) for r in run_rows(db_url)] == [
        ("finished", 1),
        ("finished", 2),
    ]
    assert after, "the re-run never asked the model"
    assert "First answer: the plan is ready." in after[0]  # the earlier turn, taken up
    assert PROMPT in after[0]
    assert SECOND in after[0]
    assert "Second answer." in [i["text"] for i in items if i["kind"] == "message"]
    assert not [i for i in items if "conversation lost" in i["text"]]
    listed = board.cli("session", "list", "--task", board.task_id)
    assert [s["agent"]["continued_by"] for s in listed] == ["resume"]
