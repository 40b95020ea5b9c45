"""Issue 37 item 1: the agent wing moved into `core.agents`; its old module names stay for one
release and are the very modules that took their place (never a second copy, whose state - a
shared ACP loop, a process's guards - would split in two)."""

from __future__ import annotations

import importlib

import pytest

from core.runtime import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_issue_37_item_1_an_old_runtime_name_is_the_new_module(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("core.worker", "core.agents.worker"),
        ("core.agent_error", "core.agents.failure"),
        ("core.feedback", "core.agents.feedback"),
    ],
)
def test_issue_37_item_1_an_old_top_level_name_is_the_new_module(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


def test_issue_37_item_1_the_old_names_reach_what_they_held() -> None:
    """What plugins and docs named through the old modules is found there still."""
    from core.runtime.failures import AgentFailure as OldFailure
    from core.runtime.runtime import AgentRuntime as OldRuntime

    from core.agents.runtime import AgentRuntime
    from core.model import AgentFailure

    assert (OldFailure, OldRuntime) == (AgentFailure, AgentRuntime)
