"""Issue 41 item 5 on the ACP client itself: `session/resume` continues a stored conversation
in a new process with nothing replayed, and `session/close` is sent only when laneway ends the
conversation (`close(end=True)`) and only to an agent that offers it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.agents.protocols.acp import TranscriptItem
from tests.acp.conftest import Start, texts


def _sent(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [json.loads(line)["method"] for line in log.read_text().splitlines()]


def _script(tmp_path: Path, **caps: Any) -> dict[str, Any]:
    return {"state_dir": str(tmp_path), "log": str(tmp_path / "agent.log"), **caps}


def test_issue_41_item_5_resume_continues_without_a_replay(start: Start, tmp_path: Path) -> None:
    script = _script(tmp_path, resume_session=True, load_session=True)
    first = start(script)
    assert first.info is not None
    assert (first.info.resume_session, first.info.close_session) == (True, False)
    session_id = first.new_session(tmp_path).session_id
    assert first.prompt("remember the number 7").ok
    first.close()

    second = start(script)
    heard: list[TranscriptItem] = []
    second.on_item = heard.append
    state = second.resume_session(session_id, tmp_path)
    assert state is not None
    assert state.session_id == session_id
    assert heard == []  # session/load would have replayed the conversation
    items: list[TranscriptItem] = []
    assert second.prompt("what was it?", on_item=items.append).ok
    assert texts(items) == ["echo: what was it? (previous: remember the number 7)"]
    assert _sent(tmp_path / "agent.log")[-2:] == ["session/resume", "session/prompt"]


def test_issue_41_item_5_resume_not_offered_is_none(start: Start, tmp_path: Path) -> None:
    agent = start(_script(tmp_path, load_session=True))
    assert agent.resume_session("fake-1-0", tmp_path) is None
    assert "session/resume" not in _sent(tmp_path / "agent.log")


def test_issue_41_item_5_close_is_sent_only_when_laneway_ends_it_and_it_is_offered(
    start: Start, tmp_path: Path
) -> None:
    log = tmp_path / "agent.log"
    offered = start(_script(tmp_path, close_session=True))
    acp_id = offered.new_session(tmp_path).session_id
    assert offered.close(end=True) is True
    assert (_sent(log)[-1], json.loads(log.read_text().splitlines()[-1])["session_id"]) == (
        "session/close",
        acp_id,
    )

    stopped = start(_script(tmp_path, close_session=True))
    stopped.new_session(tmp_path)
    assert stopped.close() is False  # the process stops; the conversation is not ended
    not_offered = start(_script(tmp_path, close_session=False))
    not_offered.new_session(tmp_path)
    assert not_offered.close(end=True) is False
    assert _sent(log).count("session/close") == 1
    assert [a.alive for a in (offered, stopped, not_offered)] == [False, False, False]
