"""Drive laneway's ACP client against tests/agents/fake_acp_agent.py as a real subprocess."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.agents.protocols.acp import AgentConnection, TranscriptItem, shared_loop

FAKE = str(Path(__file__).resolve().parents[1] / "agents" / "fake_acp_agent.py")

Start = Callable[..., AgentConnection]


def fake_env(script: dict[str, Any]) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "FAKE_ACP_SCRIPT": json.dumps(script)}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """start(script, **start_agent options): a fake agent, initialised; closed after the test."""
    started: list[AgentConnection] = []

    def run(script: dict[str, Any] | None = None, **options: Any) -> AgentConnection:
        options.setdefault("cwd", tmp_path)
        agent = shared_loop().start_agent(
            [sys.executable, FAKE], env=fake_env(script or {}), **options
        )
        started.append(agent)
        return agent

    yield run
    for agent in started:
        agent.close()


def texts(items: list[TranscriptItem], kind: str = "message") -> list[str]:
    return [i.text for i in items if i.kind == kind]
