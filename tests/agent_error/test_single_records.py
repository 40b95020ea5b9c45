"""AC-E4, AC-A6 and AC-E5 counted over every record, not only the dispatch's own: an action
with no executor gives ONE WARNING (the walk's, with the failed session among its fields; the
engine adds none), and a failed dispatch gives ONE ERROR (the dispatch's event record, naming
the action that failed; the engine adds no "trigger aborted" of its own)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent_error.helpers import World, act, dispatch_records, probe


def _pair(world: World, on_agent_error: list[dict[str, Any]]) -> tuple[Any, Any, Any]:
    wf = world.board(on_agent_error)
    task = world.task(wf)
    return wf, task, world.session(task, world.scripted("a", "worker"))


def _for_task(logs: list[dict[str, Any]], level: str, task_id: str) -> list[dict[str, Any]]:
    return [r for r in logs if r["level"] == level and r["extra"].get("task_id") == task_id]


@pytest.mark.parametrize("why", ["nobody-provides-it", "feature-off"])
def test_ac_e4_one_warning_per_action_with_no_executor(
    world: World, laneway_logs: list[dict[str, Any]], why: str
) -> None:
    """AC-E4: exactly one WARNING for the action, and it carries the failed session's id."""
    kind = "ae_nobody_provides_this" if why == "nobody-provides-it" else "queue_run"
    _wf, task, session = _pair(world, [act(kind), probe("after")])
    if why == "feature-off":
        world.host.set_features(office=False)

    world.fail(task, session)

    (warning,) = _for_task(laneway_logs, "WARNING", task.id)
    assert warning["extra"]["action_type"] == kind
    assert warning["extra"]["session_id"] == session.id
    assert world.probe.labels() == ["after"]


@pytest.mark.parametrize("how", ["action-failed", "action-raised"])
def test_ac_a6_ac_e5_a_failed_dispatch_gives_one_error(
    world: World, laneway_logs: list[dict[str, Any]], how: str
) -> None:
    """AC-A6 / AC-E5: an action fails (ActionFailed, or a stray exception): exactly one ERROR
    for the task - the dispatch's record, with session id, step id and the failed action."""
    kind = "ae_fail" if how == "action-failed" else "ae_boom"
    wf, task, session = _pair(world, [act(kind), probe("never")])

    world.fail(task, session)

    (error,) = _for_task(laneway_logs, "ERROR", task.id)
    assert error in dispatch_records(laneway_logs)
    assert error["extra"]["session_id"] == session.id
    assert error["extra"]["step_id"] == world.step_id(wf, "Work")
    assert (error["extra"]["action_type"], error["extra"]["position"]) == (kind, 0)
    assert world.probe.labels() == []
