"""The session: what a run's agent sees (its session, its prompt with the feedback given since
its last turn) and the session lifecycle around an arrival, run once per arrival before its
entry actions.

- The destination step (or its workflow) names an agent profile other than the live
  session's: the task switches to a session for that profile (a non-failed one is reused,
  otherwise one is started) and the old one completes; when the step declares no kind that
  starts the agent itself (`ActionKind.starts_agent`), the new agent is started on the step's
  prompt (a `task_assigned` run).
- A session laneway runs that is still RUNNING although no turn of it is in flight here (its
  turn ended without the state being written) flips to WAITING_FOR_INPUT.
External sessions (agents running outside laneway) never switch.

The host hands this to the arrival layer (`core.arrival.Arrivals.prepare_session`), which runs
it after each committed arrival and before the entry dispatch.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Protocol

import attrs

from core.agents.ports import AgentPort
from core.logs import logger
from core.model import Session

if TYPE_CHECKING:
    from core.agents.runtime import AgentRuntime
    from core.entry import Arrival
    from core.model import Run, Task


class AgentHost(AgentPort, Protocol):
    """What the worker and the arrival's session step are handed: the wing's port and the
    agent runtime (which the rooms below the runtime never call)."""

    @property
    def runtime(self) -> AgentRuntime: ...


def prepare_session(host: AgentHost, arrival: Arrival) -> Session | None:
    """The session the arrival's session kinds act on (None: the task has none), read once;
    an arrival at a terminal step may retire the task's worktree (issue 23)."""
    session = _prepare(host, arrival)
    if arrival.workflow.retires_worktree_at(arrival.step.id) and not (
        arrival.session_id and host.runtime.turn_in_flight(arrival.session_id)
    ):
        # a turn in flight here works in that worktree still: archiving retires it later; and
        # git's machinery is loaded only where a worktree retires
        from core.agents import sandbox
        from core.services import worktrees

        room = functools.partial(sandbox.cleanup_room, host.store)
        worktrees.retire_at_terminal(host, arrival.task.id, arrival.step.id, room)
    return session


def _prepare(host: AgentHost, arrival: Arrival) -> Session | None:
    session_id = arrival.session_id
    wanted = arrival.step.agent_profile_id or arrival.workflow.agent_profile_id
    if session_id is None and wanted is None:
        # A step that starts its agent itself (auto_start_agent, found through a runner seat)
        # gets the agent's session now, before its entry's session kinds run: a start step's
        # set_session_mode then applies to the very first turn (AGENTS.md, issue 29).
        if not _starts_itself(host, arrival):
            return None
        agent = host.participants.primary_agent(arrival.task, arrival.step.id)
        if agent is None:
            return None
        return profile_session(host, arrival.task, agent)
    session = host.sessions.get(session_id) if session_id else None
    if (
        session is not None
        and session.state == "RUNNING"
        and not session.external
        and not host.runtime.turn_in_flight(session.id)
    ):
        host.sessions.set_state(session.id, "WAITING_FOR_INPUT")
        session = attrs.evolve(session, state="WAITING_FOR_INPUT")
    if wanted is None or (session is not None and session.external):
        return session
    if session is not None and session.agent_profile_id == wanted:
        return session
    switched = profile_session(host, arrival.task, wanted)
    if session is not None and session.id != switched.id:
        host.sessions.set_state(session.id, "COMPLETED")
    logger.bind(
        task_id=arrival.task.id,
        step_id=arrival.step.id,
        session_id=switched.id,
        agent_profile_id=wanted,
    ).info("session switched to the step's agent")
    if not _starts_itself(host, arrival):
        host.runs.assign(arrival.task, arrival.step.id, wanted)
    return switched


def _starts_itself(host: AgentHost, arrival: Arrival) -> bool:
    """The step's entry declares a kind that starts the agent (`ActionKind.starts_agent`)."""
    registry = host.bundle.registry
    return any(
        (registered := registry.kind(a.kind)) is not None and registered.kind.starts_agent
        for a in arrival.step.actions("on_enter")
    )


def profile_session(host: AgentPort, task: Task, agent_profile_id: str) -> Session:
    """The task's session for an agent: a non-failed one is reused, else one is started."""
    # the sessions' writes only when a session is looked for: a move that starts no agent,
    # like a manual one, never imports them
    from core.services.sessions import agent_session

    return agent_session(host.sessions, task.id, agent_profile_id)


def prompt_for(host: AgentPort, run: Run, task: Task | None = None) -> str:
    """The run's prompt: the workflow and step prompts with the task's description, then the
    verdicts and comments given since the agent's last turn on the task (core.agents.feedback;
    none on a first run), then the run's message. `task`: the run's task, when the caller has
    just read it."""
    from core.agents import feedback
    from core.prompts import build_prompt

    if task is None and run.task_id:
        task = host.tasks.get(run.task_id)
    if task is None or run.workflow_step_id is None:
        return str((run.payload or {}).get("message", ""))
    workflow, step = host.workflows.step_by_id(run.workflow_step_id)
    text = build_prompt(workflow.prompt, step.prompt, task.description)
    given = feedback.since_last_turn(host, run, task)
    if given is not None:
        names = {s.id: s.name for s in workflow.steps}
        text = f"{text}\n\n{feedback.block(given, names)}"
    message = (run.payload or {}).get("message")
    return f"{text}\n\n{message}" if message else text
