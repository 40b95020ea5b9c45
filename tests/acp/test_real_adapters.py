"""Issue 29 "The real adapters", moved to the adapters people install today (issue 41 item 1):
`@agentclientprotocol/claude-agent-acp` and `@agentclientprotocol/codex-acp`, with no
credentials and no network (an empty network namespace, `unshare -n`), driven through laneway's
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
