"""What a run's agent has not seen yet: the verdicts and comments given on its task since its
last turn (issue 22: a reviewer's reasons reach the worker).

Its prompt carries them in the block `block` writes (docs/agents.md, "Stdin: the prompt"), and
the tool server's `get_task` returns them as `feedback`. A first run has no last turn, and so
no feedback: the step prompt is what it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs
import sqlalchemy as sa

from core.model import Comment, Decision, Run
from core.store import prepared
from core.store import tables as t

if TYPE_CHECKING:
    from core.agents.ports import AgentPort

HEADER: Final = "## Feedback since your last turn"


@attrs.frozen
class Feedback:
    since: str
    """When the agent's last turn on the task began (its prompt was given then)."""
    verdicts: tuple[Decision, ...]
    comments: tuple[Comment, ...]


R = t.runs
_LAST_START = sa.select(sa.func.max(R.c.claimed_at)).where(
    R.c.task_id == sa.bindparam("task_id"),
    R.c.agent_profile_id == sa.bindparam("agent"),
    R.c.id != sa.bindparam("run_id"),
    R.c.claimed_at.is_not(None),
)


def last_turn_start(host: AgentPort, run: Run) -> str | None:
    """When `run`'s agent last began a turn on its task (another run than `run`: a re-claimed
    run is not its own last turn); None for a first run. One aggregate over the task's runs
    (it read the task and every run of it, on every run).

    The start, not the end: a reviewer woken by this agent's turn may record its verdict
    before the worker has written the turn's end, and everything given after the agent's
    last prompt is new to it. What the agent gave itself meanwhile is left out below."""
    with host.store.read() as conn:
        found = prepared.execute(  # once per run: prepared driver SQL
            conn,
            _LAST_START,
            {"task_id": run.task_id, "agent": run.agent_profile_id, "run_id": run.id},
        ).scalar()
    return str(found) if found is not None else None


def since_last_turn(host: AgentPort, run: Run) -> Feedback | None:
    """The feedback `run`'s agent has not seen, or None (a first run, or nothing new)."""
    if run.task_id is None:
        return None
    since = last_turn_start(host, run)
    if since is None:
        return _woken_by_comment(host, run)
    me = host.profiles.get(run.agent_profile_id).name
    verdicts = tuple(
        d
        for d in host.decisions.rounds(run.task_id)
        # a verdict its seat replaced later no longer stands (a cleared round keeps the
        # verdicts it ended with: a new round supersedes nothing in it)
        if d.decided_at > since
        and d.superseded_at is None
        and not (d.decider_type == "agent" and d.decider_id == run.agent_profile_id)
    )
    comments = tuple(
        c for c in host.comments.list(run.task_id) if c.created_at > since and c.author != me
    )
    if not verdicts and not comments:
        return None
    return Feedback(since, verdicts, comments)


def _woken_by_comment(host: AgentPort, run: Run) -> Feedback | None:
    """A first run a comment queued (on_comment's payload names it, issue 24): the comments
    others wrote on the task so far, the waking one among them, are all new to the agent.
    Any other first run has no feedback."""
    if run.task_id is None or not (run.payload or {}).get("comment_id"):
        return None
    me = host.profiles.get(run.agent_profile_id).name
    comments = tuple(c for c in host.comments.list(run.task_id) if c.author != me)
    return Feedback("", (), comments) if comments else None


def _indented(text: str) -> str:
    lines = text.strip().splitlines() or [""]
    return "\n".join([lines[0], *("  " + line for line in lines[1:])])


def block(feedback: Feedback, step_names: dict[str, str]) -> str:
    """The prompt block (its format is documented in docs/agents.md):

        ## Feedback since your last turn

        Verdicts at Review (round 1):
        - rejected by reviewer: the test is missing
        - approved by approver

        Comments:
        - alice: please also update the docs

    A verdict or comment of several lines continues indented by two spaces."""
    out = [HEADER]
    groups: dict[tuple[str, int], list[Decision]] = {}
    for d in sorted(feedback.verdicts, key=lambda d: (d.decided_at, d.id)):
        groups.setdefault((d.step_id, d.round), []).append(d)
    for (step_id, round_no), verdicts in groups.items():
        out.append("")
        out.append(f"Verdicts at {step_names.get(step_id, step_id)} (round {round_no}):")
        for d in verdicts:
            who = d.role or d.decider_type
            reason = f": {_indented(d.comment)}" if d.comment.strip() else ""
            out.append(f"- {d.decision} by {who}{reason}")
    if feedback.comments:
        out.append("")
        out.append("Comments:")
        out.extend(f"- {c.author}: {_indented(c.body)}" for c in feedback.comments)
    return "\n".join(out)
