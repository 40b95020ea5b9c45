"""ACP agents behind a card, driven by a real `laneway worker` process (issue 29).

Every row of AGENTS.md's two tables — what each session kind does to an `acp` agent, and how
an ACP turn ends — with tests/agents/fake_acp_agent.py behind a profile added with
`--protocol acp`, on both databases. The fake agent reports its own mode and options
(`{"state": true}`), so each test reads what the agent itself was set to, not only what
laneway believes it set.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from core.model import Session
from tests.agents.conftest import laneway, run_rows
from tests.conftest import open_host

pytestmark = pytest.mark.slow

FAKE = str(Path(__file__).resolve().with_name("fake_acp_agent.py"))


def workflow_yaml(
    on_enter: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]] = ()
) -> str:
    """Backlog -> Work (the start step: the session kinds under test, then auto_start_agent) ->
    Next (more kinds and a second turn) -> Done; an agent error sends the card to Trouble.
    Tasks are created in Backlog, so `task start` is their arrival at Work."""

    def events(kinds: Sequence[Mapping[str, Any]]) -> str:
        return json.dumps([*kinds, {"type": "auto_start_agent"}])

    return textwrap.dedent(
        f"""\
        id: acp
        name: ACP
        steps:
          - id: backlog
            name: Backlog
            position: 0
            allow_manual_move: true
          - id: work
            name: Work
            position: 1
            is_start_step: true
            allow_manual_move: true
            prompt: "work on it"
            events:
              on_enter: {events(on_enter)}
              on_turn_complete: [{{"type": "move_to_next"}}]
              on_agent_error: [{{"type": "move_to_step", "config": {{"step_id": "trouble"}}}}]
          - id: next
            name: Next
            position: 2
            allow_manual_move: true
            prompt: "and now this"
            events:
              on_enter: {events(second)}
              on_turn_complete: [{{"type": "move_to_next"}}]
              on_agent_error: [{{"type": "move_to_step", "config": {{"step_id": "trouble"}}}}]
          - id: done
            name: Done
            position: 3
            allow_manual_move: true
          - id: trouble
            name: Trouble
            position: 4
            allow_manual_move: true
        """
    )


class Board:
    """One board: a workflow, an ACP profile named `fake` seated as the runner, one task."""

    def __init__(
        self,
        url: str,
        tmp_path: Path,
        script: Mapping[str, Any],
        on_enter: Sequence[Mapping[str, Any]] = (),
        second: Sequence[Mapping[str, Any]] = (),
        command: Sequence[str] = (sys.executable, FAKE),
        yaml: str | None = None,
        **profile: Any,
    ) -> None:
        self.url = url
        self.tmp_path = tmp_path
        path = tmp_path / "acp.yml"
        path.write_text(yaml if yaml is not None else workflow_yaml(on_enter, second))
        script_file = tmp_path / "script.json"
        script_file.write_text(json.dumps(script))
        with open_host(url) as host:
            (workflow,) = host.workflows.import_file(path)
            host.profiles.add(
                "fake",
                command=list(command),
                protocol="acp",
                env={"FAKE_ACP_SCRIPT_FILE": str(script_file)},
                **profile,
            )
            for step in ("Work", "Next"):
                host.participants.add(
                    step=step, role="runner", profile="fake", workflow=workflow.id
                )
            task = host.tasks.create(workflow=workflow.id, title="Card", step="Backlog")
            host.tasks.start(task.id)
            self.task_id = task.id
            self.steps = {s.id: s.name for s in host.workflows.get(workflow.id).steps}

    def work(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        done = laneway("--db", self.url, "worker", "--once", *args, cwd=self.tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        return done.stderr

    def read(self) -> tuple[str, Session, list[dict[str, Any]]]:
        """The task's step name, its session, and the session's transcript items."""
        with open_host(self.url, read_only=True) as host:
            task = host.tasks.get(self.task_id)
            (session,) = host.sessions.list(task=self.task_id)
            items = [_item(i) for i in host.sessions.items(session.id, limit=1000)]
            step = host.workflows.step_by_id(task.workflow_step_id)[1].name
        return step, session, items


def _item(found: Any) -> dict[str, Any]:
    return {
        "kind": found.kind,
        "text": found.text,
        "data": dict(found.data),
        "run_id": found.run_id,
    }


def messages(items: list[dict[str, Any]]) -> str:
    """The agent's message text, in order (chunks said without a pause are one item)."""
    return "\n".join(i["text"] for i in items if i["kind"] == "message")


def echoes(items: list[dict[str, Any]]) -> list[str]:
    """The fake agent's `echo: PROMPT (previous: PREVIOUS PROMPT)`, one per prompt."""
    return re.findall(r"echo: .*?\(previous: .*?\)", messages(items), re.DOTALL)


def warnings(items: list[dict[str, Any]]) -> list[str]:
    return [i["text"] for i in items if i["kind"] == "log" and i["data"].get("level") == "warning"]


STATE = [{"state": True}]


@pytest.mark.one_database
def test_set_session_mode_reaches_an_acp_agent_before_its_first_turn(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md session kinds, `set_session_mode` (acp): session/set_mode when the agent offers
    the mode; the start step's kind applies to the very first turn (issue 29, item 3)."""
    board = Board(
        db_url,
        tmp_path,
        {"modes": ["default", "review", "plan"], "turns": [STATE]},
        on_enter=[{"type": "set_session_mode", "config": {"mode": "review"}}],
    )
    board.work()
    step, session, items = board.read()
    assert "state: mode=review options={}" in messages(items)
    assert step == "Done"  # end_turn: on_turn_complete ran, twice
    agent = session.agent
    assert agent["protocol"] == "acp"
    assert agent["mode"] == "review"
    assert agent["modes"] == ["default", "review", "plan"]
    assert isinstance(agent["acp_session_id"], str)
    assert agent["acp_session_id"]
    assert items[0]["kind"] == "prompt"


@pytest.mark.one_database
def test_a_mode_the_agent_does_not_offer_is_one_warning_naming_its_modes_and_the_turn_runs(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md: otherwise a WARNING naming the modes it offers, nothing applied."""
    board = Board(
        db_url,
        tmp_path,
        {"modes": ["default", "plan"], "turns": [STATE]},
        on_enter=[{"type": "set_session_mode", "config": {"mode": "yolo"}}],
    )
    board.work()
    step, _session, items = board.read()
    (warning,) = [w for w in warnings(items) if "yolo" in w]
    assert "default, plan" in warning
    assert "state: mode=default options={}" in messages(items)
    assert step == "Done"


@pytest.mark.one_database
def test_plan_mode_uses_the_agents_plan_mode_and_goes_back_when_disabled(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md: enable_plan_mode / disable_plan_mode -> the agent's `plan` mode when it offers
    one, and back to the mode in force before."""
    board = Board(
        db_url,
        tmp_path,
        {"modes": ["default", "plan"], "mode": "default", "turns": [STATE]},
        on_enter=[{"type": "enable_plan_mode"}],
        second=[{"type": "disable_plan_mode"}],
    )
    board.work()
    step, session, items = board.read()
    said = messages(items)
    assert said.count("state: mode=plan options={}") == 1
    assert said.count("state: mode=default options={}") == 1
    assert said.index("state: mode=plan options={}") < said.index("state: mode=default options={}")
    assert step == "Done"
    assert session.agent["plan_mode"] is False


@pytest.mark.one_database
def test_plan_mode_without_a_plan_mode_heads_every_prompt_with_the_instruction(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md: otherwise a plan-mode instruction heads every prompt until disabled."""
    from core.agents.desired import PLAN_INSTRUCTION

    board = Board(
        db_url,
        tmp_path,
        {"modes": ["default"], "turns": [[]]},
        on_enter=[{"type": "enable_plan_mode"}],
        second=[{"type": "disable_plan_mode"}],
    )
    board.work()
    _step, _session, items = board.read()
    prompts = [i["text"] for i in items if i["kind"] == "prompt"]
    assert len(prompts) == 2
    assert prompts[0].startswith(PLAN_INSTRUCTION)
    assert "work on it" in prompts[0]
    assert not prompts[1].startswith(PLAN_INSTRUCTION)
    assert PLAN_INSTRUCTION in echoes(items)[0]  # the agent was sent it


@pytest.mark.one_database
def test_configure_session_sets_the_agents_options_and_model(db_url: str, tmp_path: Path) -> None:
    """AGENTS.md: configure_session -> session/set_config_option per option; the model through
    the agent's model option."""
    options = [
        {"id": "effort", "name": "Effort", "values": ["low", "high"], "current": "low"},
        {
            "id": "model",
            "name": "Model",
            "values": ["small", "large"],
            "current": "small",
            "category": "model",
        },
    ]
    rules = {
        "rules": [
            {
                "agent_name": "fake",
                "operation": "set",
                "model": "large",
                "config_options": {"effort": "high"},
            },
            {"agent_name": "someone-else", "operation": "set", "model": "small"},
        ]
    }
    board = Board(
        db_url,
        tmp_path,
        {"config_options": options, "turns": [STATE]},
        on_enter=[{"type": "configure_session", "config": rules}],
        second=[
            {
                "type": "configure_session",
                "config": {"rules": [{"agent_name": "fake", "operation": "restore_original"}]},
            }
        ],
    )
    board.work()
    _step, session, items = board.read()
    states = re.findall(r"state: .*", messages(items))
    assert states == [
        'state: mode=default options={"effort": "high", "model": "large"}',
        'state: mode=default options={"effort": "low", "model": "small"}',
    ]
    assert session.agent["model"] == "small"


@pytest.mark.one_database
def test_reset_agent_context_opens_a_new_acp_session_and_applies_the_mode_again(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md: reset_agent_context -> the next turn runs in a new ACP session; mode, model
    and options are applied again."""
    board = Board(
        db_url,
        tmp_path,
        {"modes": ["default", "review"], "turns": [STATE]},
        on_enter=[{"type": "set_session_mode", "config": {"mode": "review"}}],
        second=[{"type": "reset_agent_context"}],
    )
    board.work()
    _step, _session, items = board.read()
    said = echoes(items)
    assert len(said) == 2
    assert said[1].endswith("(previous: None)")  # a fresh conversation remembers nothing
    assert messages(items).count("state: mode=review options={}") == 2


@pytest.mark.one_database
def test_a_conversation_continues_in_the_live_process(db_url: str, tmp_path: Path) -> None:
    """AGENTS.md: a conversation continues across turns: the live process when it is there."""
    board = Board(db_url, tmp_path, {"turns": [[]]})
    board.work()
    _step, _session, items = board.read()
    said = echoes(items)
    assert said[0].endswith("(previous: None)")
    assert said[1].endswith("(previous: work on it)")


def test_a_new_worker_continues_the_conversation_by_session_load(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md: else session/load with the stored ACP session id when the agent advertises
    loadSession (a second worker process takes the second turn)."""
    state = tmp_path / "conversations"
    state.mkdir()
    board = Board(db_url, tmp_path, {"load_session": True, "state_dir": str(state), "turns": [[]]})
    board.work("--max-runs", "1")
    board.work()
    _step, _session, items = board.read()
    said = echoes(items)
    assert len(said) == 2
    assert said[1].endswith("(previous: work on it)")
    assert not [w for w in warnings(items) if "conversation lost" in w]


@pytest.mark.one_database
def test_without_session_load_a_new_worker_says_the_conversation_was_lost(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md: else a new ACP session and a WARNING `conversation lost` on the session."""
    board = Board(db_url, tmp_path, {"load_session": False, "turns": [[]]})
    board.work("--max-runs", "1")
    board.work()
    _step, _session, items = board.read()
    assert len([w for w in warnings(items) if w == "conversation lost"]) == 1
    assert echoes(items)[1].endswith("(previous: None)")


@pytest.mark.one_database
@pytest.mark.parametrize(
    ("steps", "route", "message"),
    [
        ([{"stop": "refusal"}], "R1", "agent refused"),
        (
            [{"error": {"code": -32000, "message": "Authentication required"}}],
            "R3",
            "authentication failed: Authentication required",
        ),
        ([{"stderr": "segfault in module"}, {"exit": 3}], "R1", "segfault in module"),
    ],
    ids=["refusal", "auth", "exit-mid-turn"],
)
def test_how_an_acp_turn_ends_routes_it(
    db_url: str, tmp_path: Path, steps: list[dict[str, Any]], route: str, message: str
) -> None:
    """AGENTS.md "How a turn ends (ACP)": refusal is R1 `agent refused`; an authentication
    error R3 with the agent's message; the process exiting mid-turn R1 with the last stderr
    line. Each runs on_agent_error (the card goes to Trouble)."""
    board = Board(db_url, tmp_path, {"turns": [steps]})
    board.work()
    step, session, _items = board.read()
    assert step == "Trouble"
    error = session.metadata["last_agent_error"]
    assert error["route"] == route
    assert message in error["message"]
    assert [r["status"] for r in run_rows(db_url)] == ["failed"]


@pytest.mark.one_database
@pytest.mark.parametrize(
    ("script", "route", "message"),
    [
        ({"init": "auth_error"}, "R3", "run `fake login` first"),
        ({"new": "auth_error"}, "R3", "HTTP 401 Unauthorized"),
    ],
    ids=["initialize", "session-new"],
)
def test_an_authentication_error_before_the_prompt_is_r3_with_the_agents_message(
    db_url: str, tmp_path: Path, script: dict[str, Any], route: str, message: str
) -> None:
    """AGENTS.md "How a turn ends (ACP)": an error that says authentication is needed, at
    `initialize` or `session/new` (as at `session/prompt`), is R3 with the agent's message."""
    board = Board(db_url, tmp_path, script)
    board.work()
    step, session, _items = board.read()
    error = session.metadata["last_agent_error"]
    assert (error["route"], step) == (route, "Trouble")
    assert message in error["message"]
    assert error["message"].startswith("authentication failed")


@pytest.mark.one_database
def test_an_agent_that_cannot_be_started_is_r2(db_url: str, tmp_path: Path) -> None:
    """AGENTS.md "How a turn ends (ACP)": the process cannot be started -> R2."""
    board = Board(db_url, tmp_path, {}, command=[str(tmp_path / "no-such-agent")])
    board.work()
    step, session, _items = board.read()
    error = session.metadata["last_agent_error"]
    assert (error["route"], step) == ("R2", "Trouble")
    assert "no-such-agent" in error["message"]


@pytest.mark.one_database
def test_an_authentication_error_at_session_load_is_r3(db_url: str, tmp_path: Path) -> None:
    """AGENTS.md: ... at `session/load` too (a second worker loads the conversation)."""
    state = tmp_path / "conversations"
    state.mkdir()
    script = {"load_session": True, "state_dir": str(state), "turns": [[]]}
    board = Board(db_url, tmp_path, script)
    board.work("--max-runs", "1")
    (tmp_path / "script.json").write_text(json.dumps({**script, "load": "auth_error"}))
    board.work()
    step, session, _items = board.read()
    error = session.metadata["last_agent_error"]
    assert (error["route"], step) == ("R3", "Trouble")
    assert "session expired: log in again" in error["message"]


@pytest.mark.one_database
def test_max_tokens_ends_the_turn_with_a_warning(db_url: str, tmp_path: Path) -> None:
    """AGENTS.md: max_tokens (and max_turn_requests) end the turn, with a WARNING."""
    board = Board(db_url, tmp_path, {"turns": [[{"stop": "max_tokens"}], []]})
    board.work()
    step, _session, items = board.read()
    assert step == "Done"
    assert any("max_tokens" in w for w in warnings(items))


@pytest.mark.one_database
def test_a_busy_provider_is_retried_after_the_delay_it_names(db_url: str, tmp_path: Path) -> None:
    """AGENTS.md: rate limit -> transient (R4 ladder); the delay the error names is honoured."""
    busy = {"error": {"code": -32603, "message": "rate limited", "data": {"retryAfterMs": 300}}}
    board = Board(db_url, tmp_path, {"turns": [[busy], [], []]})
    board.work(env={"LANEWAY_RETRY_DELAYS": "60"})  # the ladder's 60 s would time the test out
    step, _session, _items = board.read()
    assert step == "Done"


@pytest.mark.one_database
def test_usage_the_agent_reports_is_kept_per_run(db_url: str, tmp_path: Path) -> None:
    """Issue 29 item 5: usage and cost the agent reports are kept per run."""
    board = Board(
        db_url, tmp_path, {"turns": [[{"usage": {"used": 10, "size": 100, "cost": 0.25}}], []]}
    )
    board.work()
    costs = [r["usage"] for r in run_rows(db_url)]
    assert costs[0] is not None
    assert json.loads(costs[0])["cost_usd"] == pytest.approx(0.25)


@pytest.mark.one_database
def test_deny_answers_a_permission_request_with_a_reject_option(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md profiles: --permissions deny picks the request's first reject option."""
    board = Board(
        db_url,
        tmp_path,
        {"turns": [[{"permission": {"kind": "edit", "title": "Edit a.py"}}], []]},
        permissions="deny",
    )
    board.work()
    _step, _session, items = board.read()
    assert "permission: no" in messages(items)  # the fake's reject_once option
    (permission,) = [i for i in items if i["kind"] == "permission"]
    assert permission["data"]["decided_by"] == "policy:deny"


@pytest.mark.one_database
def test_an_exec_agent_is_told_the_desired_state_in_its_environment(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md session kinds, the exec column: LANEWAY_SESSION_MODE, LANEWAY_PLAN_MODE=1,
    LANEWAY_MODEL, LANEWAY_OPTION_<NAME>, LANEWAY_FRESH_CONTEXT=1 on the next turn."""
    path = tmp_path / "acp.yml"
    path.write_text(
        workflow_yaml(
            [
                {"type": "set_session_mode", "config": {"mode": "review"}},
                {"type": "enable_plan_mode"},
                {
                    "type": "configure_session",
                    "config": {
                        "rules": [
                            {
                                "agent_name": "env",
                                "operation": "set",
                                "model": "m1",
                                "config_options": {"max-depth": "3"},
                            }
                        ]
                    },
                },
            ],
            [{"type": "reset_agent_context"}],
        )
    )
    seen = tmp_path / "seen.jsonl"
    code = (
        "import json, os, sys; sys.stdin.read(); "
        f"open({str(seen)!r}, 'a').write(json.dumps({{k: v for k, v in os.environ.items() "
        "if k.startswith(('LANEWAY_SESSION_MODE', 'LANEWAY_PLAN', 'LANEWAY_MODEL', "
        "'LANEWAY_OPTION', 'LANEWAY_FRESH'))}) + '\\n')"
    )
    with open_host(db_url) as host:
        (workflow,) = host.workflows.import_file(path)
        host.profiles.add("env", command=[sys.executable, "-c", code])
        for step in ("Work", "Next"):
            host.participants.add(step=step, role="runner", profile="env", workflow=workflow.id)
        task = host.tasks.create(workflow=workflow.id, title="Card", step="Backlog")
        host.tasks.start(task.id)
    done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first, second = [json.loads(line) for line in seen.read_text().splitlines()]
    assert first == {
        "LANEWAY_SESSION_MODE": "review",
        "LANEWAY_PLAN_MODE": "1",
        "LANEWAY_MODEL": "m1",
        "LANEWAY_OPTION_MAX_DEPTH": "3",
    }
    assert second == {**first, "LANEWAY_FRESH_CONTEXT": "1"}


@pytest.mark.one_database
def test_an_exec_agents_lines_are_transcript_items_as_they_arrive(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md "What the board sees": `{"log"}` lines and other stdout lines of exec agents,
    the last stderr lines of a failure; a `{"usage"}` line is added to the run's usage."""
    path = tmp_path / "acp.yml"
    path.write_text(workflow_yaml([]))
    code = (
        "import json, sys; sys.stdin.read(); "
        "print('compiling', flush=True); "
        "print(json.dumps({'log': 'half way'}), flush=True); "
        "print(json.dumps({'usage': {'cost_usd': 0.5, 'input_tokens': 7, 'output_tokens': 3}})); "
        "sys.exit('the build broke')"
    )
    with open_host(db_url) as host:
        (workflow,) = host.workflows.import_file(path)
        host.profiles.add("lines", command=[sys.executable, "-c", code])
        host.participants.add(step="Work", role="runner", profile="lines", workflow=workflow.id)
        task = host.tasks.create(workflow=workflow.id, title="Card", step="Backlog")
        host.tasks.start(task.id)
    done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with open_host(db_url, read_only=True) as host:
        (session,) = host.sessions.list(task=task.id)
        items = [_item(i) for i in host.sessions.items(session.id, limit=100)]
    assert [(i["kind"], i["text"]) for i in items if i["kind"] != "prompt"] == [
        ("output", "compiling"),
        ("log", "half way"),
        ("stderr", "the build broke"),
    ]
    (run,) = run_rows(db_url)
    assert {i["run_id"] for i in items} == {run["id"]}
    assert json.loads(run["usage"]) == {"cost_usd": 0.5, "input_tokens": 7, "output_tokens": 3}


@pytest.mark.one_database
def test_a_reviewer_decides_through_the_tool_server_and_the_quorum_moves_the_task(
    db_url: str, tmp_path: Path
) -> None:
    """Issue 29 tests: a reviewer seat worked by the fake ACP agent decides through the tool
    server (`decide`, AGENTS.md "The tool server") and the quorum moves the task; a tool call
    naming another task is refused; `get_task` answers with the task and its step's prompt."""
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "turns": [
                    [
                        {"mcp": {"tool": "get_task", "args": {}}},
                        {
                            "mcp": {
                                "tool": "decide",
                                "args": {"task_id": "elsewhere", "verdict": "approved"},
                            }
                        },
                        {
                            "mcp": {
                                "tool": "decide",
                                "args": {"verdict": "approved", "comment": "reads well"},
                            }
                        },
                    ]
                ]
            }
        )
    )
    with open_host(db_url) as host:
        wf = host.workflows.create_from_template("office-default")
        host.workspace.set(office_workflow=wf.id)
        host.profiles.add(
            "rev",
            command=[sys.executable, FAKE],
            protocol="acp",
            role="reviewer",
            env={"FAKE_ACP_SCRIPT_FILE": str(script)},
        )
        host.participants.add(step="Review", role="reviewer", profile="rev", workflow=wf.id)
        task = host.tasks.create(workflow=wf.id, title="Git sync", description="sync the repos")
        host.tasks.move(task.id, "Review")
    done = laneway("--db", db_url, "worker", "--once", "--max-runs", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with open_host(db_url, read_only=True) as host:
        moved = host.tasks.get(task.id)
        step = host.workflows.step_by_id(moved.workflow_step_id)[1].name
        review = next(s.id for s in wf.steps if s.name == "Review")
        (verdict,) = host.decisions.list(task.id, review)
        (session,) = host.sessions.list(task=task.id)
        said = messages([_item(i) for i in host.sessions.items(session.id, limit=100)])
    assert step == "Approval"
    assert (verdict.decision, verdict.comment) == ("approved", "reads well")
    assert f"this run acts for task {task.id} only" in said
    assert "Git sync" in said  # get_task's answer
    assert "sync the repos" in said


@pytest.mark.one_database
def test_a_conversation_the_agent_no_longer_has_is_lost_not_failed(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md: session/load that the agent cannot serve (it forgot the conversation) is not
    the agent's failure: a new ACP session and a WARNING `conversation lost`."""
    state = tmp_path / "conversations"
    state.mkdir()
    script = {"load_session": True, "state_dir": str(state), "turns": [[]]}
    board = Board(db_url, tmp_path, script)
    board.work("--max-runs", "1")
    for kept in state.iterdir():
        kept.unlink()
    board.work()
    step, _session, items = board.read()
    assert step == "Done"
    assert len([w for w in warnings(items) if w == "conversation lost"]) == 1
    assert echoes(items)[1].endswith("(previous: None)")


@pytest.mark.one_database
def test_issue_41_item_7_laneway_run_id_is_the_run_on_every_turn_of_a_conversation(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md "Phase 4": LANEWAY_RUN_ID is the run being executed on every turn of a
    conversation (an agent that loads its sessions is restarted between runs, the conversation
    continued by session/load), and the tool server's `get_task` returns it as `run_id`."""
    state = tmp_path / "conversations"
    state.mkdir()
    step = [{"env_value": "LANEWAY_RUN_ID"}, {"mcp": {"tool": "get_task", "args": {}}}]
    board = Board(
        db_url, tmp_path, {"load_session": True, "state_dir": str(state), "turns": [step]}
    )
    board.work()
    _step, _session, items = board.read()
    runs = [r["id"] for r in run_rows(db_url)]
    assert len(runs) == 2
    said = messages(items)
    starts = [m.end() for m in re.finditer("LANEWAY_RUN_ID=", said)]
    assert [said[at : at + len(run)] for at, run in zip(starts, runs, strict=True)] == runs
    decoder = json.JSONDecoder()
    told = [
        decoder.raw_decode(said, m.end())[0]["run_id"] for m in re.finditer("mcp get_task: ", said)
    ]
    assert told == runs
    assert echoes(items)[1].endswith("(previous: work on it)")  # the conversation went on


@pytest.mark.one_database
def test_issue_41_item_3_a_profiles_mode_is_where_its_conversations_start(
    db_url: str, tmp_path: Path
) -> None:
    """AGENTS.md "Phase 4" `profile add|set --mode M`: the mode is set before the first prompt
    and reconciled every turn; a step's set_session_mode still overrides it for its step."""
    board = Board(
        db_url,
        tmp_path,
        {"modes": ["default", "review", "plan"], "turns": [STATE]},
        second=[{"type": "set_session_mode", "config": {"mode": "plan"}}],
        mode="review",
    )
    board.work()
    _step, session, items = board.read()
    said = [line for line in messages(items).splitlines() if "state: mode=" in line]
    assert [re.sub(r".*state: mode=(\w+).*", r"\1", line) for line in said] == ["review", "plan"]
    assert session.agent["mode"] == "plan"
