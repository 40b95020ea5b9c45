"""Issue 41 item 2: the real Gemini CLI (`gemini --acp`, npm `@google/gemini-cli` 0.61) doing real
turns through a real `laneway worker`, with no credentials and no network: its model answered
by tests/agents/gemini_standin.py (the Gemini API, `v1beta` streamGenerateContent) on loopback,
named by GOOGLE_GEMINI_BASE_URL, everything else the CLI would reach turned off in the
settings.json of its temporary HOME (and refused by the stand-in as its proxy: `strays`).

Gemini's `default` mode asks before every edit; `autoEdit` edits on its own; `plan` refuses
edits (docs/agents.md). Its edits go through laneway's `fs/read_text_file` and
`fs/write_text_file`: the scripted model edits the repository's README.md with `replace`
(Gemini CLI 0.61 cannot create a *new* file through a client's file system: it takes the
client's "not found" answer to its read-before-write for a failure, see docs/agents.md). The
profile is named `claude` only because the board helper of test_issue_41_real_claude.py names
it so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.acp.test_real_adapters import adapter
from tests.agents.conftest import laneway, run_rows
from tests.agents.gemini_standin import (
    Call,
    Fail,
    Hold,
    Reply,
    Request,
    Standin,
    Text,
    environment,
    gemini,
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


def agent(
    standin: Standin, config: Mapping[str, Any] | None = None
) -> tuple[list[str], Callable[[Path], dict[str, str]]]:
    def env(home: Path) -> dict[str, str]:
        return environment(standin, str(home), config)

    return [adapter("gemini", "@google/gemini-cli"), "--acp"], env


def replace(old: str, new: str) -> Call:
    """The model's `replace` of `old` by `new` in the workspace's README.md."""

    def args(request: Request) -> Mapping[str, Any]:
        return {
            "file_path": f"{request.workdir()}/README.md",
            "old_string": old,
            "new_string": new,
            "instruction": f"say {new} instead of {old}",
        }

    return Call("replace", args)


def results(standin: Standin) -> list[dict[str, Any]]:
    """The tool results (functionResponse parts) the model was sent, each once."""
    found: dict[str, dict[str, Any]] = {}
    for request in standin.conversation():
        for response in request.function_responses():
            found.setdefault(str(response.get("id")), response)
    return list(found.values())


# -- a prompt turn; an edit a person allows or denies ---------------------------------------------


@pytest.mark.one_database  # the board's side of a permission is proved on both by Claude's
@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_issue_41_item_2_gemini_edits_the_worktree_only_after_a_person_allows_it(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]], answer: str
) -> None:
    """`--mode default` under `--permissions ask`: the step's prompt reaches the model, which
    calls `replace` on README.md; Gemini asks, the request waits on the board (kind `edit`,
    titled by Gemini with the path relative to the worktree), a separate `permission
    allow|deny` process answers. Allowed: README.md is changed in the task's worktree, `task
    diff` shows it, the model's closing words are in the transcript, the card moves on.
    Denied: nothing changes and the diff is empty."""
    with gemini([replace("world", "gemini"), Text("Replaced it.")]) as standin:
        board = Claude(
            db_url, tmp_path, None, agent=agent(standin), permissions="ask", mode="default"
        )
        worker = board.start_worker()
        started.append(worker)
        (asked,) = eventually(board.pending, timeout=90, what="a pending request", every=0.2)
        assert asked["tool_call"]["kind"] == "edit"
        assert asked["tool_call"]["title"] == "README.md: world => gemini"
        assert (board.worktree() / "README.md").read_text() == "hello\nworld\n"  # it waits
        board.cli("permission", answer, asked["id"])
        finish(worker)
        assert standin.strays == []
        first = standin.conversation()[0]
    assert first.said(PROMPT)
    assert first.model == "gemini-2.5-pro"
    diff = board.cli("task", "diff", board.task_id)
    step, session, items = board.read()
    assert session.agent["mode"] == "default"
    (item,) = [i for i in items if i["kind"] == "permission"]
    assert item["data"]["decided_by"] == "person"
    if answer == "allow":
        assert session.metadata.get("last_agent_error") is None
        assert step == "Done"
        assert "Replaced it." in [i["text"] for i in items if i["kind"] == "message"]
        assert (board.worktree() / "README.md").read_text() == "hello\ngemini\n"
        assert [(f["path"], f["status"]) for f in diff["files"]] == [("README.md", "modified")]
        assert "+gemini" in diff["patch"]
        (result,) = results(standin)
        assert "Successfully modified file" in str(result["response"])
    else:
        assert (board.worktree() / "README.md").read_text() == "hello\nworld\n"
        assert diff["files"] == []


# -- the profile's mode, the step's plan mode, and the conversation across runs ------------------


@pytest.mark.one_database
def test_issue_41_item_2_gemini_auto_edit_edits_unasked_and_the_steps_plan_mode_refuses(
    db_url: str, tmp_path: Path
) -> None:
    """`profile add --mode autoEdit` under `--permissions ask`: the conversation starts in
    that mode, so Gemini edits README.md on its own (nothing waits for a person). The next
    step's `set_session_mode: plan` puts the same conversation in Gemini's plan mode, where it
    refuses the model's next edit itself: nothing asked, README.md keeps the first edit. The
    second run continues the conversation in the live Gemini process (laneway keeps it: a
    restart would need Gemini 0.61's `session/load`, which mostly loses the conversation, see
    the kill -9 test): the model's request in it carries the first turn."""
    # the second step (Next) sets plan mode before its turn
    head = f"prompt: {json.dumps(SECOND)}\n    events:\n      on_enter: ["
    plan = json.dumps({"type": "set_session_mode", "config": {"mode": "plan"}})
    yaml = workflow_yaml(second=True).replace(head, f"{head}{plan}, ", 1)
    assert plan in yaml
    script: list[Reply] = [
        replace("world", "gemini"),
        Text("First edit made."),
        replace("gemini", "planned"),
        Text("Plan written."),
    ]
    with gemini(script) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=agent(standin),
            yaml=yaml,
            permissions="ask",
            mode="autoEdit",
        )
        board.work()
        assert standin.strays == []
        turns = standin.conversation()
    step, session, items = board.read()
    assert step == "Done"
    assert board.cli("permission", "list") == []
    assert [i for i in items if i["kind"] == "permission"] == []
    assert (board.worktree() / "README.md").read_text() == "hello\ngemini\n"
    assert session.agent["mode"] == "plan"
    assert session.agent["continued_by"] == "new"  # once, at the first run: never lost
    second = next(t for t in turns if t.said(SECOND))
    assert second.said("First edit made.")  # the earlier turn, in the live process
    first, refused = results(standin)
    assert "Successfully modified file" in str(first["response"])
    assert "Successfully modified file" not in str(refused["response"])
    assert [r["status"] for r in run_rows(db_url)] == ["finished", "finished"]


# -- laneway's own tools, never asking a person ---------------------------------------------------


@pytest.mark.one_database
def test_issue_41_item_2_gemini_comments_and_decides_through_the_tool_server_without_asking(
    db_url: str, tmp_path: Path
) -> None:
    """A reviewer seat under `--permissions ask` and `--mode default`: the scripted model calls
    laneway's `comment` and `decide` (Gemini offers them to the model as
    `mcp_laneway_comment`, `mcp_laneway_decide`, and asks before the first titled `comment
    (laneway MCP Server)`); nothing waits for a person (the worker runs to the end with no one
    answering): laneway allows it at once for the whole server, and the transcript shows that
    permission decided by `laneway-tool`. Review has two reviewer seats (all_approve): the
    other one, an exec agent, approves too, so the card reaches Done only if Gemini's verdict
    counted."""
    script: list[Reply] = [
        Call("mcp_laneway_comment", {"text": "The change reads well."}),
        Call("mcp_laneway_decide", {"verdict": "approved", "comment": "ship it"}),
        Text("Approved."),
    ]
    with gemini(script) as standin:
        board = reviewer_board(db_url, tmp_path, None, mode="default", agent=agent(standin))
        board.work()
        assert standin.strays == []
        first = standin.conversation()[0]
    assert {"mcp_laneway_comment", "mcp_laneway_decide"} <= set(first.tool_names())
    step, _session, items = board.read()
    assert step == "Done"
    assert board.cli("permission", "list") == []  # nothing was put to a person
    (asked,) = [i["data"] for i in items if i["kind"] == "permission"]
    assert asked["tool_call"]["title"] == "comment (laneway MCP Server)"
    assert asked["decided_by"] == "laneway-tool"
    titles = [i["data"].get("title") for i in items if i["kind"] == "tool_call"]
    assert "decide (laneway MCP Server)" in titles  # the call still shows
    comments = board.cli("task", "comments", board.task_id)
    assert [(c["author"], c["body"]) for c in comments] == [("claude", "The change reads well.")]
    verdicts = board.cli("decision", "list", "--task", board.task_id, "--step", "Review", "--all")
    assert sorted((v["decision"], v["comment"]) for v in verdicts) == [
        ("approved", "ship it"),
        ("approved", "the exec reviewer agrees"),
    ]
    assert [r["name"] for r in results(standin)] == ["mcp_laneway_comment", "mcp_laneway_decide"]


# -- the model API's errors ------------------------------------------------------------------------

ONE_TRY = {"general": {"maxAttempts": 1}}
"""Gemini CLI's own retries off (it tries a request up to 10 times with backoff otherwise)."""


@pytest.mark.one_database
def test_issue_41_item_2_a_401_from_the_gemini_api_is_r3(db_url: str, tmp_path: Path) -> None:
    """Every request answered 401 UNAUTHENTICATED: Gemini ends its prompt with an error
    carrying the API's answer; the run fails as R3 (authentication) with it, on_agent_error
    moves the card to Trouble, and laneway does not retry it."""
    fail = Fail(401, "API key not valid. Please pass a valid API key.")
    with gemini(then=fail) as standin:
        board = Claude(db_url, tmp_path, None, agent=agent(standin, ONE_TRY), permissions="allow")
        board.work(env={"LANEWAY_RETRY_DELAYS": "0.1"})
        asked = len(standin.conversation())
    step, session, items = board.read()
    error = session.metadata["last_agent_error"]
    assert error["route"] == "R3"
    assert "API key not valid" in error["message"]
    assert step == "Trouble"
    assert [r["status"] for r in run_rows(db_url)] == ["failed"]
    assert len([i for i in items if i["kind"] == "prompt"]) == 1
    assert asked == 1


@pytest.mark.one_database
def test_issue_41_item_2_a_busy_gemini_api_takes_the_transient_route(
    db_url: str, tmp_path: Path
) -> None:
    """429 RESOURCE_EXHAUSTED naming a 2 s RetryInfo delay, then 503 UNAVAILABLE, then an
    answer: Gemini ends each prompt with a JSON-RPC error whose code is the HTTP status;
    laneway takes each as transient (R4) with a WARNING, retries the 429 after the delay the
    API named (2 s, over its own ladder's 0.1 s) and the 503 after its ladder's delay, and the
    third try finishes the run in one attempt."""
    script: list[Reply] = [
        Fail(429, "Resource has been exhausted (e.g. check quota).", retry_delay="2s"),
        Fail(503, "The model is overloaded. Please try again later."),
        Text("Done after the retries."),
    ]
    with gemini(script) as standin:
        board = Claude(db_url, tmp_path, None, agent=agent(standin, ONE_TRY), permissions="allow")
        said = board.work(env={"LANEWAY_RETRY_DELAYS": "0.1,0.1"})
        asked = standin.conversation()
    step, _session, items = board.read()
    assert step == "Done"
    (run,) = run_rows(db_url)
    assert (run["status"], run["attempts"]) == ("finished", 1)
    assert len(asked) == 3
    assert asked[1].at - asked[0].at >= 2.0
    assert "attempt=1, delay=2.0" in said
    assert "attempt=2, delay=0.1" in said
    messages = [i["text"] for i in items if i["kind"] == "message"]
    assert messages[-1] == "Done after the retries."


# -- kill -9 of the worker mid-turn ----------------------------------------------------------------


@pytest.mark.one_database  # the board's side of a crash is proved on both by Claude's
def test_issue_41_item_2_gemini_survives_kill_9_of_its_worker_mid_turn(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """A first turn answered; the second turn's model request held by the stand-in; the
    worker killed with SIGKILL: Gemini and the tool server are gone (/proc), `laneway
    recover` re-queues the run, and the next worker runs it again to the end (a new Gemini
    process, the step's prompt reaching the model).

    The conversation itself is lost, and laneway says so: Gemini offers `session/load` (no
    `session/resume`), but 0.61, loading in a new process, first records the session afresh
    in the same file (its history replaced by the session context alone) and then finds
    nothing to resume ("No previous sessions found for this project"), so laneway starts a new
    ACP session with its WARNING `conversation lost` (docs/agents.md). That is a race inside
    Gemini (a load has been seen to win it), so either outcome passes, the loss only with
    Gemini's reason."""
    held = Hold(Text("Held answer, never sent."))
    script: list[Reply] = [Text("First answer: the plan is ready."), held, Text("Second answer.")]
    with gemini(script) as standin:
        board = Claude(
            db_url,
            tmp_path,
            None,
            agent=agent(standin),
            yaml=workflow_yaml(second=True),
            permissions="allow",
        )
        worker = board.start_worker()
        started.append(worker)
        assert held.reached.wait(120), "the second turn never reached the model"
        tree = descendants(worker.pid)
        assert any("gemini" in c for c in tree.values()), tree
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
        before = len(standin.conversation())
        board.work()
        after = standin.conversation()[before:]
        assert standin.strays == []
    step, _session, items = board.read()
    assert step == "Done"
    assert [(r["status"], r["attempts"]) for r in run_rows(db_url)] == [
        ("finished", 1),
        ("finished", 2),
    ]
    assert after, "the re-run never asked the model"
    assert after[0].said(SECOND)
    # continued (the earlier turn loaded), or lost and said so, with Gemini's reason
    lost = [i["data"]["reason"] for i in items if i["text"] == "conversation lost"]
    continued = after[0].said("First answer: the plan is ready.")
    assert continued or (lost and "No previous sessions found" in lost[-1])
    assert "Second answer." in [i["text"] for i in items if i["kind"] == "message"]
