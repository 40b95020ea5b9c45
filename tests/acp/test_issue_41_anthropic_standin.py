"""Issue 41 item 2: the real Claude Code agent (`@agentclientprotocol/claude-agent-acp` and the
`claude` binary it runs) does a real turn against tests/agents/anthropic_standin.py, the
scripted Anthropic Messages stand-in on loopback: no credentials, no other host reached.

Found as tests/acp/test_real_adapters.py finds the adapters (skips saying why unless
LANEWAY_ACP_REQUIRED is set). The stand-in's own shapes (non-streaming, count_tokens, errors)
are checked over plain HTTP here too.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from core.agents.protocols.acp import PermissionPolicy, shared_loop
from core.agents.values import TranscriptItem
from tests.acp.test_real_adapters import adapter
from tests.agents.anthropic_standin import Fail, Text, ToolUse, anthropic, environment


def claude_env(standin: Any, home: Path) -> dict[str, str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    return {**base, **environment(standin, str(home))}


def post(url: str, body: Any) -> tuple[int, Any, str]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            raw = answer.read().decode()
            status, kind = answer.status, answer.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        raw, status, kind = error.read().decode(), error.code, "application/json"
    return status, (json.loads(raw) if kind.startswith("application/json") else raw), kind


def test_issue_41_item_2_the_standin_answers_messages_count_tokens_and_errors() -> None:
    """Non-streaming replies (text, tool_use), streaming SSE in the documented event order,
    count_tokens, a scripted error status; side questions (no tools) never use the script."""
    tools = [{"name": "Write", "input_schema": {"type": "object"}}]
    asked = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    with anthropic(
        [
            ToolUse("Write", {"file_path": "a.txt"}, text="Writing."),
            Text("streamed"),
            Fail(429, "rate_limit_error", "slow down", {"retry-after": "3"}),
        ]
    ) as standin:
        assert post(f"{standin.url}/v1/messages", asked)[1]["content"] == [
            {"type": "text", "text": "Scripted title"}
        ]
        status, body, _ = post(f"{standin.url}/v1/messages", {**asked, "tools": tools})
        assert status == 200
        assert body["stop_reason"] == "tool_use"
        assert body["content"][0] == {"type": "text", "text": "Writing."}
        assert body["content"][1]["name"] == "Write"
        assert body["content"][1]["input"] == {"file_path": "a.txt"}
        status, raw, kind = post(
            f"{standin.url}/v1/messages", {**asked, "tools": tools, "stream": True}
        )
        assert (status, kind) == (200, "text/event-stream")
        events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]
        assert [e["type"] for e in events] == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        assert events[2]["delta"] == {"type": "text_delta", "text": "streamed"}
        status, body, _ = post(f"{standin.url}/v1/messages", {**asked, "tools": tools})
        assert (status, body["error"]["type"]) == (429, "rate_limit_error")
        status, body, _ = post(f"{standin.url}/v1/messages/count_tokens", asked)
        assert status == 200
        assert body["input_tokens"] > 0
        assert len(standin.conversation()) == 3
        assert len(standin.requests) == 5


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_issue_41_item_2_claude_agent_acp_writes_a_file_the_scripted_model_asks_for(
    tmp_path: Path,
) -> None:
    """A real turn of the real adapter: the scripted model calls Write, the agent asks
    permission (its `default` mode asks before an edit), laneway's policy allows it, the file
    is written, the model's closing text arrives, and the model saw the prompt and the tool's
    result. Nothing but the stand-in was reached."""
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    items: list[TranscriptItem] = []
    script = [
        ToolUse("Write", {"file_path": str(work / "hello.txt"), "content": "hello\n"}),
        Text("I wrote hello.txt."),
    ]
    with anthropic(script) as standin:
        agent = shared_loop().start_agent(
            [adapter("claude-agent-acp")],
            env=claude_env(standin, home),
            cwd=work,
            policy=PermissionPolicy("allow"),
            on_item=items.append,
        )
        try:
            state = agent.new_session(work)
            assert state.mode == "default"
            end = agent.prompt("Please write hello.txt saying hello.", timeout=60)
        finally:
            agent.close()
        conversation = standin.conversation()
        assert standin.strays == []
    assert (end.outcome, end.stop_reason) == ("ok", "end_turn")
    assert (work / "hello.txt").read_text() == "hello\n"
    (permission,) = [i for i in items if i.kind == "permission"]
    assert permission.data["tool_call"]["kind"] == "edit"
    assert permission.data["option_id"] == "allow-once"
    assert "I wrote hello.txt." in [i.text for i in items if i.kind == "message"]
    assert len(conversation) == 2
    assert conversation[0].said("Please write hello.txt saying hello.")
    assert "Write" in conversation[0].tool_names()
    assert conversation[1].said("File created successfully")
    assert all(r.headers.get("x-api-key") == "sk-ant-standin" for r in conversation)
