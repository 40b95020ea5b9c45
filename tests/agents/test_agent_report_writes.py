"""Issue 45 item 1: the agent's report (the session's `agent`) is written only when it changed;
every turn of a live ACP conversation reports the same session, modes and options."""

from __future__ import annotations

import time

from core.host import Host


def test_issue_45_item_1_the_agents_report_is_written_only_when_it_changed(host: Host) -> None:
    host.workflows.create_from_template("office-default")
    wf = host.workflows.list()[0]
    host.profiles.add("a", command=["true"])
    task = host.tasks.create(workflow=wf.id, title="t")
    session = host.sessions.start(task.id, profile="a")
    first = host.sessions.record_agent(session.id, acp_session_id="s1", modes=["default", "plan"])
    assert first.agent == {"acp_session_id": "s1", "modes": ["default", "plan"]}
    time.sleep(0.01)  # a write now would stamp a later updated_at
    same = host.sessions.record_agent(session.id, acp_session_id="s1", modes=["default", "plan"])
    assert same == first
    assert host.sessions.get(session.id).updated_at == first.updated_at
    changed = host.sessions.record_agent(session.id, mode="plan")
    assert changed.agent == {"acp_session_id": "s1", "modes": ["default", "plan"], "mode": "plan"}
    assert changed.updated_at > first.updated_at
    assert host.sessions.get(session.id) == changed
