"""AGENTS.md "A session is one conversation": modes, config options, the model, session/load,
and the agent process started like an exec agent (own group, exactly the given environment)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from core.agents.protocols.acp import TranscriptItem, shared_loop
from tests.acp.conftest import FAKE, Start, texts

OPTIONS = [
    {"id": "model", "name": "Model", "values": ["small", "large"], "current": "small",
     "category": "model"},
    {"id": "effort", "name": "Effort", "values": ["low", "high"], "current": "low"},
]  # fmt: skip


def test_set_mode_applies_an_offered_mode(start: Start, tmp_path: Path) -> None:
    """set_session_mode row: `session/set_mode` when the agent offers the mode (here `plan`,
    which enable_plan_mode uses)."""
    agent = start({"modes": ["default", "plan"]})
    state = agent.new_session(tmp_path)
    assert (state.mode_ids, state.mode) == (("default", "plan"), "default")
    change = agent.set_mode("plan")
    assert (change.applied, change.current) == (True, "plan")
    assert agent.session is not None
    assert agent.session.mode == "plan"


def test_set_mode_not_offered_sends_nothing_and_names_the_offered(
    start: Start, tmp_path: Path
) -> None:
    """set_session_mode row: a mode the agent does not offer is not applied; the answer names
    the modes it offers, for the caller's WARNING, and the session goes on."""
    agent = start({"modes": ["default", "plan"]})
    agent.new_session(tmp_path)
    change = agent.set_mode("yolo")
    assert (change.applied, change.current, change.offered) == (
        False,
        "default",
        ("default", "plan"),
    )
    assert agent.prompt("still works").ok


def test_config_options_and_the_model_option(start: Start, tmp_path: Path) -> None:
    """configure_session row: `session/set_config_option` per option; the model through the
    agent's model option (its config option of category `model`)."""
    agent = start({"config_options": OPTIONS})
    state = agent.new_session(tmp_path)
    assert (state.models, state.model) == (("small", "large"), "small")
    after = agent.set_config_option("effort", "high")
    assert {o.id: o.current for o in after.config_options} == {"model": "small", "effort": "high"}
    change = agent.set_model("large")
    assert (change.applied, change.current) == (True, "large")
    missing = agent.set_model("huge")
    assert (missing.applied, missing.offered) == (False, ("small", "large"))


@pytest.mark.parametrize("replay", ["before the answer", "late"])
def test_load_session_continues_the_conversation_in_a_new_process(
    start: Start, tmp_path: Path, replay: str
) -> None:
    """ "A conversation continues across turns ... else `session/load` with the stored ACP
    session id when the agent advertises loadSession"; its replay is not transcript again,
    also when the agent streams it after answering session/load (as Gemini CLI 0.61 does: CI
    once saw a replayed answer joined to the next turn's)."""
    script = {"load_session": True, "state_dir": str(tmp_path), "replay": replay}
    first = start(script)
    assert first.info is not None
    assert first.info.load_session
    session_id = first.new_session(tmp_path).session_id
    assert first.prompt("the plan").ok
    assert first.prompt("remember the number 7").ok
    first.close()

    second = start(script)
    state = second.load_session(session_id, tmp_path)
    assert state is not None
    assert state.session_id == session_id
    items: list[TranscriptItem] = []
    assert second.prompt("what was it?", on_item=items.append).ok
    assert texts(items) == ["echo: what was it? (previous: remember the number 7)"]


def test_load_session_not_advertised_is_none(start: Start, tmp_path: Path) -> None:
    """Without loadSession the caller opens a new session (and warns `conversation lost`)."""
    agent = start({"load_session": False})
    assert agent.load_session("fake-1-0", tmp_path) is None


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_agent_runs_in_its_own_group_with_exactly_the_given_env(tmp_path: Path) -> None:
    """Issue 29: "in its own process group with the no-orphans rules exec agents have"; the
    environment is exactly the caller's (agent_env), nothing of the worker's added."""
    env = {
        "PATH": os.environ["PATH"],
        "ONLY_THIS": "1",
        "FAKE_ACP_SCRIPT": json.dumps({"turns": [[{"env": True}]]}),
    }
    agent = shared_loop().start_agent([sys.executable, FAKE], env=env, cwd=tmp_path)
    try:
        assert agent.pid is not None
        assert os.getpgid(agent.pid) == agent.pid
        agent.new_session(tmp_path)
        items: list[TranscriptItem] = []
        agent.prompt("env", on_item=items.append)
        # chunks sent back to back are one message item
        reported = "".join(texts(items)).split("env: ", 1)[1]
        names = set(json.loads(reported))
        # LC_CTYPE: CPython's UTF-8 coercion sets it in the child on a C locale.
        assert names - {"LC_CTYPE"} == {"PATH", "ONLY_THIS", "FAKE_ACP_SCRIPT"}
    finally:
        agent.close()
    assert not agent.alive
