"""A comment's on_comment delivered from the outbox (`core.outbox`) means what its delivery by
the commenting process means: a comment an agent's `comment` tool wrote does not wake that
agent, whoever delivers it. (The crash itself, `kill -9` between the comment's COMMIT and its
delivery, is tests/multiprocess/test_trigger_crashes.py.)"""

from __future__ import annotations

import types

import pytest

from core.host import Host


def _asked(host: Host, task: str) -> int:
    return sum(r.coalesced_count for r in host.runs.list(task=task) if r.reason == "task_comment")


def test_an_outboxed_agent_comment_does_not_wake_its_agent_a_persons_does(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    wf = host.workflows.create_from_template("office-default")
    worker = host.profiles.add("worker", command=["agent"])
    host.participants.add(step="Work", role="runner", profile="worker", workflow=wf.id)
    task = host.tasks.move(host.tasks.create(workflow=wf.id, title="t").id, "Work").id

    # the commenting process "dies" after the COMMIT: nothing delivers the trigger but the outbox
    dead = types.SimpleNamespace(drain=lambda: None)
    monkeypatch.setattr(host.comments, "_triggers", lambda: dead)
    host.comments.add(task, "I pushed a fix", author="worker", by_agent=worker.id)
    host.comments.add(task, "Thanks, one more thing", author="alice")
    assert _asked(host, task) == 0

    report = host.triggers.drain()
    assert report.delivered == 2
    # the person's comment woke the runner once; the agent's own comment did not
    assert _asked(host, task) == 1
    assert host.triggers.drain().delivered == 0
