"""Issue 29 "The real adapters", moved to the adapters people install today (issue 41 item 1):
`@agentclientprotocol/claude-agent-acp` and `@agentclientprotocol/codex-acp`, `gemini --acp`
(`@google/gemini-cli`) and `opencode acp` (`opencode-ai`), with no credentials and no network
(an empty network namespace, `unshare -n`, where the agent allows it), driven through laneway's
ACP client.

Opt-in: an adapter is found on PATH or in $LANEWAY_ACP_ADAPTERS (a node_modules folder, e.g.
from `npm install @agentclientprotocol/claude-agent-acp @agentclientprotocol/codex-acp`); a
test skips,
saying why, when its adapter or `unshare -n` is not there — unless LANEWAY_ACP_REQUIRED is set
(`.ci/run` sets it after installing them), when a missing adapter fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.agents.protocols.acp import AcpError, PermissionPolicy, shared_loop


def _missing(reason: str) -> None:
    if os.environ.get("LANEWAY_ACP_REQUIRED"):
        pytest.fail(f"LANEWAY_ACP_REQUIRED is set but {reason}")
    pytest.skip(reason)


def adapter(name: str, package: str | None = None) -> str:
    """The adapter's executable; `package` is the npm package that brings it (by default
    `@agentclientprotocol/<name>`), named when it is missing."""
    folder = os.environ.get("LANEWAY_ACP_ADAPTERS")
    found = (
        str(Path(folder, ".bin", name)) if folder and Path(folder, ".bin", name).exists() else None
    ) or shutil.which(name)
    if found is None:
        _missing(
            f"{name} is not installed (npm install {package or '@agentclientprotocol/' + name})"
        )
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        _missing("no unshare here to run the adapter without a network")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        _missing(f"unshare -n is refused here: {probe.stderr.decode().strip()}")
    assert found is not None
    return str(Path(found).resolve())


def no_credentials(home: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_issue_41_item_1_claude_agent_acp_offers_plan_and_fails_r3_without_credentials(
    tmp_path: Path,
) -> None:
    """claude-agent-acp with no credentials initialises, opens a session, reports its modes
    (among them `plan`), takes the mode asked for, and its turn fails as R3 with the agent's
    "Authentication required" message, in bounded time."""
    command = ["unshare", "-n", adapter("claude-agent-acp")]
    began = time.monotonic()
    agent = shared_loop().start_agent(
        command, env=no_credentials(tmp_path), cwd=tmp_path, policy=PermissionPolicy("deny")
    )
    try:
        assert agent.info is not None
        assert agent.info.load_session
        state = agent.new_session(tmp_path)
        assert "plan" in state.mode_ids
        assert agent.set_mode("plan").applied
        end = agent.prompt("Say hello.", timeout=60)
        assert (end.outcome, end.route) == ("failed", "R3")
        assert "Authentication required" in end.message
    finally:
        agent.close()
    assert time.monotonic() - began < 90


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_issue_41_item_1_codex_acp_refuses_at_session_new_as_r3(tmp_path: Path) -> None:
    """codex-acp with no credentials initialises (naming its auth methods) and refuses
    earlier: session/new fails as R3, "Authentication required"."""
    command = ["unshare", "-n", adapter("codex-acp")]
    agent = shared_loop().start_agent(command, env=no_credentials(tmp_path), cwd=tmp_path)
    try:
        assert agent.info is not None
        assert agent.info.auth_methods
        with pytest.raises(AcpError) as caught:
            agent.new_session(tmp_path)
        assert caught.value.end.route == "R3"
        assert "Authentication required" in caught.value.end.message
    finally:
        agent.close()


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_issue_41_item_1_gemini_acp_starts_offline_and_refuses_at_session_new_as_r3(
    tmp_path: Path,
) -> None:
    """`gemini --acp` (npm `@google/gemini-cli`) with no credentials and no network answers
    `initialize` (naming its auth methods, the Gemini API key among them); session/new fails
    as R3 with the agent's "Gemini API key is missing" message."""
    command = ["unshare", "-n", adapter("gemini", "@google/gemini-cli"), "--acp"]
    agent = shared_loop().start_agent(command, env=no_credentials(tmp_path), cwd=tmp_path)
    try:
        assert agent.info is not None
        assert "gemini-api-key" in agent.info.auth_methods
        with pytest.raises(AcpError) as caught:
            agent.new_session(tmp_path)
        assert caught.value.end.route == "R3"
        assert "Gemini API key is missing" in caught.value.end.message
    finally:
        agent.close()


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_issue_41_item_1_gemini_acp_opens_a_session_with_its_modes_given_a_key(
    tmp_path: Path,
) -> None:
    """With a (dummy) GEMINI_API_KEY and no network, `gemini --acp` opens a session offering
    the modes docs/agents.md lists (`default`, `autoEdit`, `yolo`, `plan`) and takes `plan`."""
    command = ["unshare", "-n", adapter("gemini", "@google/gemini-cli"), "--acp"]
    env = {**no_credentials(tmp_path), "GEMINI_API_KEY": "dummy-key"}
    agent = shared_loop().start_agent(command, env=env, cwd=tmp_path)
    try:
        state = agent.new_session(tmp_path)
        assert {"default", "autoEdit", "yolo", "plan"} <= set(state.mode_ids)
        assert state.mode == "default"
        assert agent.set_mode("plan").applied
        assert agent.session is not None
        assert agent.session.mode == "plan"
    finally:
        agent.close()


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_issue_41_item_1_opencode_acp_offers_its_modes_as_a_config_option(
    tmp_path: Path,
) -> None:
    """`opencode acp` (npm `opencode-ai`), its provider a loopback address nothing answers and
    every fetch of its own turned off (not `unshare -n`: OpenCode serves itself on loopback,
    which an empty network namespace has down, and fails "directory"): it initialises
    offering `session/resume` and `session/close`, opens a session whose modes (`build`,
    `plan`) come only as a config option of category `mode`, which laneway reports as its
    modes and sets through that option."""
    from tests.agents.chat_standin import Standin, opencode_env

    nowhere = Standin([], url="http://127.0.0.1:9")
    env = {**no_credentials(tmp_path), **opencode_env(nowhere, tmp_path / "home")}
    command = [adapter("opencode", "opencode-ai"), "acp"]
    work = tmp_path / "work"  # a project of its own, beside its home
    work.mkdir()
    agent = shared_loop().start_agent(command, env=env, cwd=work)
    try:
        assert agent.info is not None
        assert agent.info.resume_session
        assert agent.info.close_session
        state = agent.new_session(work)
        assert state.mode_ids == ("build", "plan")
        assert state.mode == "build"
        assert agent.set_mode("plan").applied
        assert agent.session is not None
        assert agent.session.mode == "plan"
    finally:
        agent.close()
