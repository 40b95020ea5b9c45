"""Issue 41 item 2: the real Claude Code agent doing real turns through a real `laneway worker`,
with no credentials and no network: `@agentclientprotocol/claude-agent-acp` (and the `claude`
binary it runs), its model answered by tests/agents/anthropic_standin.py on loopback.

What a person and the board see is asserted on the board (permissions, the task's diff, the
step, the runs); what reached the adapter is asserted from what the scripted model was sent
(its requests are recorded). The adapter is found as tests/acp/test_real_adapters.py finds it
(skipped saying why unless LANEWAY_ACP_REQUIRED is set).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from core.host import Host
from core.model import Session
from tests.acp.test_real_adapters import adapter
from tests.agents.anthropic_standin import (
    Fail,
    Hold,
    Reply,
    Standin,
    Text,
    ToolUse,
    anthropic,
    environment,
    in_workdir,
)
from tests.agents.conftest import laneway, laneway_script, run_rows, script_env
from tests.agents.test_worktrees import make_repo
from tests.conftest import eventually, open_host, wait_for_dead_processes
from tests.serve.page_kit import browser

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the page test's browser fixture, used by name

PROMPT = "Please write hello.txt."
SECOND = "And now the second part."


def workflow_yaml(on_enter: Sequence[Mapping[str, Any]] = (), second: bool = False) -> str:
    """Backlog -> Work (the runner's turn: `on_enter` kinds, then auto_start_agent) [-> Next,
    a second turn, when `second`] -> Done; an agent error sends the card to Trouble."""

    def step(sid: str, name: str, position: int, prompt: str, kinds: Sequence[Any]) -> str:
        events = json.dumps([*kinds, {"type": "auto_start_agent"}])
        return (
            f"  - id: {sid}\n    name: {name}\n    position: {position}\n"
            f"    allow_manual_move: true\n    prompt: {json.dumps(prompt)}\n"
            f"    events:\n      on_enter: {events}\n"
            '      on_turn_complete: [{"type": "move_to_next"}]\n'
            '      on_agent_error: [{"type": "move_to_step", "config": {"step_id": "trouble"}}]\n'
        )

    work = step("work", "Work", 1, PROMPT, on_enter).replace(
        "    allow_manual_move", "    is_start_step: true\n    allow_manual_move", 1
    )
    nxt = step("next", "Next", 2, SECOND, []) if second else ""
    return (
        "id: claude\nname: Claude\nsteps:\n"
        "  - id: backlog\n    name: Backlog\n    position: 0\n    allow_manual_move: true\n"
        + work
        + nxt
        + "  - id: done\n    name: Done\n    position: 3\n    allow_manual_move: true\n"
        "  - id: trouble\n    name: Trouble\n    position: 4\n    allow_manual_move: true\n"
    )


REVIEW_YAML = textwrap.dedent(
    """\
    id: review
    name: Review
    steps:
      - id: backlog
        name: Backlog
        position: 0
        is_start_step: true
        allow_manual_move: true
      - id: review
        name: Review
        position: 1
        allow_manual_move: true
        prompt: "Review the change and decide."
        events:
          on_enter:
            - type: clear_decisions
            - type: queue_run_for_each_participant
              config: {role: reviewer, reason: review_started}
          on_turn_complete:
            - type: move_to_step
              config:
                step_id: done
                wait_for_quorum: {role: reviewer, threshold: all_approve}
            - type: move_to_step
              config:
                step_id: backlog
                wait_for_quorum: {role: reviewer, threshold: any_reject}
      - id: done
        name: Done
        position: 2
        allow_manual_move: true
    """
)


class Claude:
    """A board whose one task is worked by the real Claude Code agent in a git worktree."""

    def __init__(
        self,
        url: str,
        tmp_path: Path,
        standin: Standin | None,
        *,
        yaml: str | None = None,
        seat: tuple[str, str] = ("Work", "runner"),
        start_at: str | None = None,
        env: Mapping[str, str] | None = None,
        setup: Callable[[Host, str], object] | None = None,
        agent: tuple[list[str], Callable[[Path], dict[str, str]]] | None = None,
        **profile: Any,
    ) -> None:
        """`agent`: another adapter's command and its environment (made from its home) in
        place of Claude's pointed at `standin`."""
        self.url = url
        self.tmp_path = tmp_path
        self.standin = standin
        home = tmp_path / "home"
        home.mkdir()
        repo = make_repo(tmp_path / "repo")
        path = tmp_path / "board.yml"
        path.write_text(yaml if yaml is not None else workflow_yaml())
        self.worker_env = {"LANEWAY_WORKTREES": str(tmp_path / "worktrees")}
        with open_host(url) as host:
            (workflow,) = host.workflows.import_file(path)
            if agent is None:
                assert standin is not None
                command = [adapter("claude-agent-acp")]
                agent_env = environment(standin, str(home), **(env or {}))
            else:
                command, agent_env = agent[0], agent[1](home)
            host.profiles.add("claude", command=command, protocol="acp", env=agent_env, **profile)
            host.participants.add(
                step=seat[0], role=seat[1], profile="claude", workflow=workflow.id
            )
            if setup is not None:
                setup(host, workflow.id)
            task = host.tasks.create(
                workflow=workflow.id, title="Card", step="Backlog", repository=str(repo)
            )
            self.task_id = task.id
            if start_at is None:
                host.tasks.start(task.id)
            else:
                host.tasks.move(task.id, start_at)

    def cli(self, *args: str) -> Any:
        done = laneway("--db", self.url, "--json", *args, cwd=self.tmp_path)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def work(self, env: Mapping[str, str] | None = None) -> str:
        """One `laneway worker --once` until the queue is empty."""
        done = laneway(
            "--db",
            self.url,
            "worker",
            "--once",
            cwd=self.tmp_path,
            env={**self.worker_env, **(env or {})},
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    def start_worker(self, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [laneway_script(), "--db", self.url, "worker", "--once"],
            cwd=self.tmp_path,
            env=script_env({**self.worker_env, **(env or {})}),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def pending(self) -> list[dict[str, Any]]:
        return list(self.cli("permission", "list", "--state", "pending"))

    def read(self) -> tuple[str, Session, list[dict[str, Any]]]:
        """The task's step name, Claude's session, and the session's transcript items."""
        with open_host(self.url, read_only=True) as host:
            task = host.tasks.get(self.task_id)
            claude = host.profiles.get("claude").id
            (session,) = [
                s for s in host.sessions.list(task=self.task_id) if s.agent_profile_id == claude
            ]
            items = [
                {"kind": i.kind, "text": i.text, "data": dict(i.data)}
                for i in host.sessions.items(session.id, limit=1000)
            ]
            step = host.workflows.step_by_id(task.workflow_step_id)[1].name
        return step, session, items

    def worktree(self) -> Path:
        with open_host(self.url, read_only=True) as host:
            workspace = host.tasks.get(self.task_id).workspace
        assert workspace is not None
        return Path(workspace["path"])


EXEC_APPROVES = (
    "import json, sys; sys.stdin.read(); "
    "print(json.dumps({'decision': 'approved', 'comment': 'the exec reviewer agrees'}))"
)
"""An exec reviewer that approves whatever it is shown."""


def reviewer_board(
    url: str,
    tmp_path: Path,
    standin: Standin | None,
    *,
    mode: str,
    agent: tuple[list[str], Callable[[Path], dict[str, str]]] | None = None,
) -> Claude:
    """The tool-server tests' board: the real agent on Review's reviewer seat under
    `--permissions ask` and `mode`, beside a second reviewer seat whose exec agent approves
    (all_approve), so the card reaches Done only if the real agent's own verdict counted."""

    def exec_reviewer(host: Host, workflow: str) -> None:
        host.profiles.add("exec-reviewer", command=["python3", "-c", EXEC_APPROVES])
        host.participants.add(
            step="Review", role="reviewer", profile="exec-reviewer", workflow=workflow
        )

    return Claude(
        url,
        tmp_path,
        standin,
        agent=agent,
        yaml=REVIEW_YAML,
        seat=("Review", "reviewer"),
        start_at="Review",
        permissions="ask",
        mode=mode,
        setup=exec_reviewer,
    )


def finish(worker: subprocess.Popen[str], timeout: float = 120.0) -> str:
    try:
        _out, err = worker.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise AssertionError("the worker hung") from None
    assert worker.returncode == 0, err
    return err


def write_script() -> list[Reply]:
    return [ToolUse("Write", in_workdir("hello.txt", "hello from claude\n")), Text("Wrote it.")]


def tool_results(standin: Standin) -> list[dict[str, Any]]:
    """Every tool_result block the model was sent, in order (each once)."""
    found: dict[str, dict[str, Any]] = {}
    for request in standin.conversation():
        for message in request.body["messages"]:
            content = message.get("content")
            if isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        found.setdefault(block["tool_use_id"], block)
    return list(found.values())


def result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content)


# -- (1) an edit a person allows or denies ------------------------------------------------------


def test_issue_41_item_2_claude_writes_a_file_after_a_person_allows_it_from_the_cli(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """`--permissions ask` and `--mode default` (its mode that asks before every edit): the
    scripted model calls Write, the real agent asks, the request waits on the board titled with
    the path relative to the worktree, a separate `permission allow` process answers, the file
    is in the task's worktree, `task diff` shows it, the card moves on."""
    with anthropic(write_script()) as standin:
        board = Claude(db_url, tmp_path, standin, permissions="ask", mode="default")
        worker = board.start_worker()
        started.append(worker)
        (asked,) = eventually(board.pending, timeout=90, what="a pending request", every=0.2)
        assert asked["tool_call"]["kind"] == "edit"
        assert asked["tool_call"]["title"] == "Write hello.txt"
        assert not (board.worktree() / "hello.txt").exists()  # it waits for the person
        allowed = board.cli("permission", "allow", asked["id"])
        assert (allowed["state"], allowed["decided_by"]) == ("allowed", "user")
        finish(worker)
        assert standin.strays == []
    assert (board.worktree() / "hello.txt").read_text() == "hello from claude\n"
    diff = board.cli("task", "diff", board.task_id)
    assert [(f["path"], f["status"]) for f in diff["files"]] == [("hello.txt", "added")]
    assert "+hello from claude" in diff["patch"]
    step, session, items = board.read()
    assert step == "Done"
    assert session.agent["mode"] == "default"
    (item,) = [i for i in items if i["kind"] == "permission"]
    assert item["data"]["decided_by"] == "person"
    assert "Wrote it." in [i["text"] for i in items if i["kind"] == "message"]
    (result,) = tool_results(standin)
    assert not result.get("is_error")
    assert "File created successfully" in result_text(result)
    assert [r["status"] for r in run_rows(db_url)] == ["finished"]


@pytest.mark.one_database
def test_issue_41_item_2_claude_does_not_write_the_file_after_a_deny(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """`permission deny`: the agent is answered with its reject option, nothing is written,
    the diff is empty, and the model is told the call was refused."""
    with anthropic(write_script()) as standin:
        board = Claude(db_url, tmp_path, standin, permissions="ask", mode="default")
        worker = board.start_worker()
        started.append(worker)
        (asked,) = eventually(board.pending, timeout=90, what="a pending request", every=0.2)
        denied = board.cli("permission", "deny", asked["id"])
        assert denied["state"] == "denied"
        finish(worker)
    assert not (board.worktree() / "hello.txt").exists()
    assert board.cli("task", "diff", board.task_id)["files"] == []
    (result,) = tool_results(standin)
    assert result.get("is_error") is True
    assert "hello.txt" not in os.listdir(board.worktree())


@pytest.mark.one_database
def test_issue_41_item_2_claude_writes_a_file_after_a_person_allows_it_over_http(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """The same allow through `POST /api/permissions/{p}` of a `laneway serve` process."""
    from tests.serve.conftest import start_serve
    from tests.serve.test_serve_api import ok

    with anthropic(write_script()) as standin:
        board = Claude(db_url, tmp_path, standin, permissions="ask", mode="default")
        served = start_serve(db_url, tmp_path)
        try:
            worker = board.start_worker()
            started.append(worker)
            with served.client() as c:
                query = {"task": board.task_id, "state": "pending"}
                (asked,) = eventually(
                    lambda: ok(c.get("/api/permissions", params=query)),
                    timeout=90,
                    what="a pending request",
                    every=0.2,
                )
                answered = ok(c.post(f"/api/permissions/{asked['id']}", json={"outcome": "allow"}))
                assert answered["state"] == "allowed"
            finish(worker)
        finally:
            served.stop(signal.SIGKILL)
    assert (board.worktree() / "hello.txt").read_text() == "hello from claude\n"
    assert [f["path"] for f in board.cli("task", "diff", board.task_id)["files"]] == ["hello.txt"]


@pytest.mark.one_database
def test_issue_41_item_2_claude_writes_a_file_after_a_person_clicks_allow_on_the_page(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]], browser: Any
) -> None:
    """The same allow from the board page in Debian's chromium: the card's panel shows the
    real agent's request titled with the path relative to the worktree, a person clicks Allow,
    the file is in the task's worktree, the request leaves the panel and the card moves on."""
    from tests.serve.conftest import start_serve
    from tests.serve.page_kit import open_page

    with anthropic(write_script()) as standin:
        board = Claude(db_url, tmp_path, standin, permissions="ask", mode="default")
        served = start_serve(db_url, tmp_path)
        try:
            worker = board.start_worker()
            started.append(worker)
            page = open_page(browser, served)
            page.locator(".card[data-title='Card']").click()
            page.locator("#detail-title", has_text="Card").wait_for(timeout=10_000)
            request = page.locator(".permissions .permission", has_text="Write hello.txt")
            request.wait_for(timeout=90_000)
            assert not (board.worktree() / "hello.txt").exists()  # it waits for the person
            request.locator("button", has_text="Allow").click()
            page.locator(".toast.ok", has_text="Permission allowed").wait_for(timeout=10_000)
            finish(worker)
            page.locator(".permissions").wait_for(state="detached", timeout=10_000)
            page.locator(".lane[data-step-name='Done'] .card[data-title='Card']").wait_for(
                timeout=10_000
            )
            assert page.errors == []
            page.context.close()
        finally:
            served.stop(signal.SIGKILL)
    assert (board.worktree() / "hello.txt").read_text() == "hello from claude\n"
    assert [f["path"] for f in board.cli("task", "diff", board.task_id)["files"]] == ["hello.txt"]
    (answered,) = board.cli("permission", "list")
    assert (answered["state"], answered["decided_by"]) == ("allowed", "user")


# -- (2) laneway's own tools, never asking a person ---------------------------------------------


@pytest.mark.one_database
def test_issue_41_item_2_claude_comments_and_decides_through_the_tool_server_without_asking(
    db_url: str, tmp_path: Path
) -> None:
    """A reviewer seat under `--permissions ask` and `--mode default`: the scripted model calls
    laneway's `comment` and `decide` tools; neither waits for a person (the worker runs to the
    end with no one answering), the transcript still shows each call's permission, decided by
    `laneway-tool`. Review has two reviewer seats (all_approve): the other one, an exec agent,
    approves too, so the card reaches Done only if Claude's verdict counted."""
    script: list[Reply] = [
        ToolUse("mcp__laneway__comment", {"text": "The change reads well."}),
        ToolUse("mcp__laneway__decide", {"verdict": "approved", "comment": "ship it"}),
        Text("Approved."),
    ]
    with anthropic(script) as standin:
        board = reviewer_board(db_url, tmp_path, standin, mode="default")
        board.work()
        assert standin.strays == []
        first = standin.conversation()[0]
    # Claude Code defers MCP tools: it names them to the model, which loads them by ToolSearch
    assert first.said("mcp__laneway__comment")
    assert first.said("mcp__laneway__decide")
    step, _session, items = board.read()
    assert step == "Done"
    assert board.cli("permission", "list") == []  # nothing was put to a person
    asked = [i["data"] for i in items if i["kind"] == "permission"]
    assert [a["decided_by"] for a in asked] == ["laneway-tool", "laneway-tool"]
    comments = board.cli("task", "comments", board.task_id)
    assert [(c["author"], c["body"]) for c in comments] == [("claude", "The change reads well.")]
    verdicts = board.cli("decision", "list", "--task", board.task_id, "--step", "Review", "--all")
    assert sorted((v["decision"], v["comment"]) for v in verdicts) == [
        ("approved", "ship it"),
        ("approved", "the exec reviewer agrees"),
    ]
    results = tool_results(standin)
    assert len(results) == 2
    assert not any(r.get("is_error") for r in results)


# -- (3) the step's mode and model reach the adapter ---------------------------------------------


@pytest.mark.one_database
def test_issue_41_item_2_the_steps_plan_mode_reaches_claude(db_url: str, tmp_path: Path) -> None:
    """The step's `set_session_mode: plan` over the profile's `--mode acceptEdits`: the adapter
    is in plan mode when the prompt reaches the model (Claude Code tells the model so), and in
    that mode claude-agent-acp 0.101 asks before the Write the model tries (acceptEdits would
    not): under `--permissions deny` the request is refused, nothing is written, and the model
    is told so."""
    on_enter = [{"type": "set_session_mode", "config": {"mode": "plan"}}]
    with anthropic(write_script()) as standin:
        board = Claude(
            db_url,
            tmp_path,
            standin,
            yaml=workflow_yaml(on_enter),
            permissions="deny",
            mode="acceptEdits",
        )
        board.work()
        first, *_rest = standin.conversation()
    assert first.said("Plan mode is active")
    _step, session, items = board.read()
    assert session.agent["mode"] == "plan"
    (asked,) = [i["data"] for i in items if i["kind"] == "permission"]
    assert (asked["tool_call"]["title"], asked["decided_by"]) == ("Write hello.txt", "policy:deny")
    assert not (board.worktree() / "hello.txt").exists()
    (result,) = tool_results(standin)
    assert result.get("is_error") is True


@pytest.mark.one_database
def test_issue_41_item_2_the_profiles_mode_and_the_steps_model_reach_claude(
    db_url: str, tmp_path: Path
) -> None:
    """`profile add --mode acceptEdits` under `--permissions ask`: the conversation starts in
    that mode, so the agent writes without asking (docs/agents.md's table) and nothing waits
    for a person; the file is in the worktree. The step's `configure_session` model (`haiku`,
    which Claude Code resolves through ANTHROPIC_DEFAULT_HAIKU_MODEL) is the model asked."""
    configure = {
        "type": "configure_session",
        "config": {"rules": [{"agent_name": "claude", "operation": "set", "model": "haiku"}]},
    }
    with anthropic(write_script()) as standin:
        board = Claude(
            db_url,
            tmp_path,
            standin,
            yaml=workflow_yaml([configure]),
            permissions="ask",
            mode="acceptEdits",
            env={"ANTHROPIC_DEFAULT_HAIKU_MODEL": "standin-haiku"},
        )
        board.work()
        models = {r.body["model"] for r in standin.conversation()}
    _step, session, items = board.read()
    assert (session.agent["mode"], session.agent["model"]) == ("acceptEdits", "haiku")
    assert models == {"standin-haiku"}
    assert (board.worktree() / "hello.txt").read_text() == "hello from claude\n"
    assert board.cli("permission", "list") == []
    assert [i for i in items if i["kind"] == "permission"] == []


# -- (4) kill -9 of the worker mid-turn ----------------------------------------------------------


def descendants(pid: int) -> dict[int, str]:
    """The live processes under `pid` (by /proc), with their command lines."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            found[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        todo += children.get(child, [])
    return found


def alive(pids: Iterator[int] | list[int]) -> list[int]:
    living = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.append(pid)
    return living


# The adapter is what this proves; the re-queue after a kill -9 is proven on both databases
# with the fake agent (tests/agents/test_acp_crash.py).
@pytest.mark.one_database
def test_issue_41_item_2_claude_survives_kill_9_of_its_worker_mid_turn(
    db_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """A first turn answered; the second turn's model request held by the stand-in; the
    worker killed with SIGKILL: the adapter, the `claude` process and the tool server are gone
    (/proc), `laneway recover` re-queues the run, the next worker runs it again in the same
    conversation (`session/load`), and the model's next request carries the earlier turn."""
    held = Hold(Text("Held answer, never sent."))
    script: list[Reply] = [Text("First answer: the plan is ready."), held, Text("Second answer.")]
    with anthropic(script) as standin:
        board = Claude(
            db_url, tmp_path, standin, yaml=workflow_yaml(second=True), permissions="allow"
        )
        worker = board.start_worker()
        started.append(worker)
        assert held.reached.wait(120), "the second turn never reached the model"
        tree = descendants(worker.pid)
        assert any("claude-agent-acp" in c for c in tree.values()), tree
        assert any("/claude" in c.split(" ")[0] for c in tree.values()), tree
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
    step, _session, items = board.read()
    assert step == "Done"
    assert [(r["status"], r["attempts"]) for r in run_rows(db_url)] == [
        ("finished", 1),
        ("finished", 2),
    ]
    assert after, "the re-run never asked the model"
    assert after[0].said("First answer: the plan is ready.")  # the earlier turn, loaded
    assert after[0].said(PROMPT)
    assert after[0].said(SECOND)
    assert "Second answer." in [i["text"] for i in items if i["kind"] == "message"]
    assert not [i for i in items if "conversation lost" in i["text"]]


# -- (5) the model API's errors -------------------------------------------------------------------


@pytest.mark.one_database
def test_issue_41_item_2_a_401_from_the_model_api_is_r3(db_url: str, tmp_path: Path) -> None:
    """The stand-in answers every request 401, Claude Code's own retries off
    (CLAUDE_CODE_MAX_RETRIES=0: it retries a 401 with backoff for minutes otherwise): the run
    fails as R3 (authentication) with the agent's words, on_agent_error moves the card
    to Trouble, and laneway does not retry it."""
    with anthropic(then=Fail(401, "authentication_error", "invalid x-api-key")) as standin:
        board = Claude(
            db_url, tmp_path, standin, permissions="allow", env={"CLAUDE_CODE_MAX_RETRIES": "0"}
        )
        board.work(env={"LANEWAY_RETRY_DELAYS": "0.1"})
        asked = len(standin.conversation())
    step, session, items = board.read()
    assert "Invalid API key" in "\n".join(i["text"] for i in items if i["kind"] == "message")
    error = session.metadata["last_agent_error"]
    assert error["route"] == "R3"
    assert "Authentication required" in error["message"]
    assert step == "Trouble"
    assert [r["status"] for r in run_rows(db_url)] == ["failed"]
    assert len([i for i in items if i["kind"] == "prompt"]) == 1
    assert asked >= 1


@pytest.mark.one_database
@pytest.mark.parametrize(
    "busy",
    [
        Fail(429, "rate_limit_error", "Too many requests", {"retry-after": "1"}),
        Fail(529, "overloaded_error", "Overloaded"),
    ],
    ids=["429", "529"],
)
def test_issue_41_item_2_a_busy_model_api_takes_the_transient_route(
    db_url: str, tmp_path: Path, busy: Fail
) -> None:
    """429 (with retry-after) and 529, with Claude Code's own retries off
    (CLAUDE_CODE_MAX_RETRIES=0, so the test is bounded): the turn ends transient (R4), laneway
    retries the prompt after its retry ladder's delay (LANEWAY_RETRY_DELAYS) with a WARNING,
    and the second answer finishes the run in one attempt. (The adapter's error does not carry
    the retry-after header, so laneway's own delay is the one waited.)"""
    with anthropic([busy, Text("Done after the retry.")]) as standin:
        board = Claude(
            db_url, tmp_path, standin, permissions="allow", env={"CLAUDE_CODE_MAX_RETRIES": "0"}
        )
        said = board.work(env={"LANEWAY_RETRY_DELAYS": "0.5"})
        asked = standin.conversation()
    step, _session, items = board.read()
    assert step == "Done"
    (run,) = run_rows(db_url)
    assert (run["status"], run["attempts"]) == ("finished", 1)
    assert len(asked) == 2
    assert asked[1].at - asked[0].at >= 0.5
    assert "transient agent failure; retrying" in said
    messages = [i["text"] for i in items if i["kind"] == "message"]
    assert messages[-1] == "Done after the retry."
    assert str(busy.status) in messages[0]
