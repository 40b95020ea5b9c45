"""AC-D1, AC-D2, AC-D3: the on_agent_error payload, as the actions receive it (`ctx.payload`,
captured by the `ae_probe` kind). `OnAgentErrorPayload`'s FailedSessionID / FailedAgentID /
ErrorMessage are laneway's `failed_session_id` / `failed_agent_id` / `error_message`."""

from __future__ import annotations

import pytest

from core.model import Session, Task
from tests.agent_error.helpers import World, probe

# the tests here run real agent processes (the tier audit, tests/conftest.py)
pytestmark = pytest.mark.subprocess


def _pair(world: World, *, with_profile: bool = True) -> tuple[Task, Session]:
    wf = world.board([probe("recover")])
    task = world.task(wf)
    agent = world.scripted("a", "worker") if with_profile else None
    return task, world.session(task, agent)


def _payload(world: World) -> dict[str, str]:
    (seen,) = world.probe.on_agent_error()
    return seen["payload"]


def test_ac_d1_failed_session_id_is_the_session_that_failed(world: World) -> None:
    """AC-D1: `failed_session_id` is the failed session's id (a real R1 failure), never
    empty on a dispatched trigger."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    world.session(task, world.scripted("bystander", "worker"))
    session = world.session(task, world.crashing(status=3))

    world.turn(session)

    assert _payload(world)["failed_session_id"] == session.id


def test_ac_d2_failed_agent_id_is_the_failing_agents_profile_on_a_real_route(
    world: World,
) -> None:
    """AC-D2: for a real failure (R2, the agent's command cannot start) the failed agent is
    the session's agent profile - not an execution id or an agent type."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    agent = world.host.profiles.add("ghost", command=[str(world.tmp / "no-such-agent")])
    session = world.session(task, agent)

    assert world.turn(session).route == "R2"
    assert _payload(world)["failed_agent_id"] == agent.id


@pytest.mark.parametrize(
    ("event_agent", "session_has_profile", "expected"),
    [("event-agent", True, "event-agent"), ("", True, "session"), ("", False, "")],
)
def test_ac_d2_failed_agent_id_falls_back_from_event_to_session_to_empty(
    world: World, event_agent: str, session_has_profile: bool, expected: str
) -> None:
    """AC-D2: the failure's own agent profile id; if empty, the failed session's agent
    profile id; if both are empty, the empty string. Never the run id or the execution id."""
    task, session = _pair(world, with_profile=session_has_profile)

    world.fail(
        task,
        session,
        agent_profile_id=event_agent,
        run_id="run-id-must-not-leak",
        agent_execution_id="exec-id-must-not-leak",
    )

    want = session.agent_profile_id if expected == "session" else expected
    assert _payload(world)["failed_agent_id"] == want


@pytest.mark.parametrize(
    ("message", "expected"),
    [("agent exited with status 9: out of memory", None), ("", "agent failed")],
)
def test_ac_d3_error_message_or_the_agent_failed_default(
    world: World, message: str, expected: str | None
) -> None:
    """AC-D3: `error_message` is the failure's message; an empty one becomes the literal
    "agent failed" - the same default the failure bookkeeping records on the session."""
    task, session = _pair(world)

    world.fail(task, session, error_message=message)

    payload = _payload(world)
    assert payload["error_message"] == (expected or message)
    recorded = world.host.sessions.get(session.id).metadata["last_agent_error"]["message"]
    assert recorded == payload["error_message"]


def test_ac_d3_a_real_failure_carries_the_agents_error(world: World) -> None:
    """AC-D3 with a real process (R1): the message is the failure's own (exit status and the
    last stderr line of the agent)."""
    wf = world.board([probe("recover")])
    task = world.task(wf)
    session = world.session(task, world.crashing(status=7))

    outcome = world.turn(session)

    assert outcome.route == "R1"
    assert _payload(world)["error_message"] == outcome.error
    assert _payload(world)["error_message"] == (
        "agent exited with status 7: crashy: the build tool crashed"
    )
