"""What a run's agent has not seen yet: the verdicts and comments given on its task since its
last turn (issue 22: a reviewer's reasons reach the worker).

Its prompt carries them in the block `block` writes (docs/agents.md, "Stdin: the prompt"), and
the tool server's `get_task` returns them as `feedback`. A first run has no last turn, and so
no feedback: the step prompt is what it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import sqlalchemy as sa

from core.model import Comment, Decision, Run, Task
from core.store import prepared, rows
from core.store import tables as t
from core.text import cut_to

if TYPE_CHECKING:
    from core.agents.ports import AgentPort

HEADER: Final = "## Feedback since your last turn"
MAX_ENTRY: Final = 2000
"""The characters of one verdict's or comment's text the block carries (cut, saying so)."""
MAX_BLOCK: Final = 16_000
"""The characters the whole block may take in a prompt: past it the oldest comments are left
out (one line says how many, and where to read them), then the block is cut."""


@attrs.frozen
class Feedback:
    since: str
    """When the agent's last turn on the task began (its prompt was given then)."""
    verdicts: tuple[Decision, ...]
    comments: tuple[Comment, ...]
    conflict: Mapping[str, Any] | None = None
    """The task's merge that conflicted since then (`into`, `strategy`, `paths`, `at`): what
    the agent must resolve before the merge can run again (issue 40)."""


R = t.runs
C = t.comments
D = t.workflow_step_decisions
_LAST_START = (
    sa.select(sa.func.max(R.c.claimed_at))
    .where(
        R.c.task_id == sa.bindparam("task_id"),
        R.c.agent_profile_id == sa.bindparam("agent"),
        R.c.id != sa.bindparam("run_id"),
        R.c.claimed_at.is_not(None),
    )
    .scalar_subquery()
)
_ME = (
    sa.select(t.agent_profiles.c.name)
    .where(t.agent_profiles.c.id == sa.bindparam("agent"))
    .scalar_subquery()
)
_NEWS = sa.select(
    _LAST_START.label("since"),
    sa.exists()
    .where(C.c.task_id == sa.bindparam("task_id"), C.c.created_at > _LAST_START, C.c.author != _ME)
    .label("comments"),
    sa.exists()
    .where(
        D.c.task_id == sa.bindparam("task_id"),
        D.c.decided_at > _LAST_START,
        D.c.superseded_at.is_(None),
        sa.not_(sa.and_(D.c.decider_type == "agent", D.c.decider_id == sa.bindparam("agent"))),
    )
    .label("verdicts"),
)
"""The cursor and what lies past it, in one statement (one snapshot): the agent's last turn
start, and whether a comment or a standing verdict of another was given after it. A turn of
a live conversation, where nothing was said, reads the task's comments and rounds no further
(issue 45: re-reading them all was a third of such a turn)."""

_COMMENTS_SINCE = (
    sa.select(C)
    .where(C.c.task_id == sa.bindparam("task_id"), C.c.created_at > sa.bindparam("since"))
    .order_by(C.c.created_at, C.c.id)
)


@attrs.frozen
class _News:
    since: str | None
    comments: bool
    verdicts: bool


def _news(host: AgentPort, run: Run) -> _News:
    """The cursor: when `run`'s agent last began a turn on its task (another run than `run`:
    a re-claimed run is not its own last turn; None for a first run), and what lies past it.

    The start, not the end: a reviewer woken by this agent's turn may record its verdict
    before the worker has written the turn's end, and everything given after the agent's
    last prompt is new to it. What the agent gave itself meanwhile is left out."""
    with host.store.read() as conn:
        found = prepared.execute(  # once per run: prepared driver SQL
            conn,
            _NEWS,
            {"task_id": run.task_id, "agent": run.agent_profile_id, "run_id": run.id},
        ).first()
    assert found is not None  # an aggregate's row
    since, comments, verdicts = found
    return _News(str(since) if since is not None else None, bool(comments), bool(verdicts))


def since_last_turn(host: AgentPort, run: Run, task: Task | None = None) -> Feedback | None:
    """The feedback `run`'s agent has not seen, or None (a first run, or nothing new).
    `task`: the run's task as the caller has just read it.

    The cursor is the agent's last turn start (its run's `claimed_at`): the comments and
    verdicts past it are read, and only when the one statement of `_NEWS` says there are
    any; the cursor and that answer come from the same read, so nothing committed between
    two reads can fall between them. A comment's and a verdict's times are taken in commit
    order against a claim's (core.store.events.in_commit_order): one stamped before the last
    turn's claim was committed before that turn read its feedback, so it was given then, and
    one stamped after lies past the cursor: none falls behind it unseen."""
    if run.task_id is None:
        return None
    news = _news(host, run)
    since = news.since
    if task is None or task.id != run.task_id:
        task = host.tasks.get(run.task_id)
    conflict = _conflict(task, since)
    if since is None:
        woken = _woken_by_comment(host, run)
        if conflict is None:
            return woken
        return attrs.evolve(woken or Feedback("", (), ()), conflict=conflict)
    if not news.comments and not news.verdicts and conflict is None:
        return None
    me = host.profiles.get(run.agent_profile_id).name
    verdicts: tuple[Decision, ...] = ()
    if news.verdicts:
        verdicts = tuple(
            d
            for d in host.decisions.rounds(run.task_id)
            # a verdict its seat replaced later no longer stands (a cleared round keeps the
            # verdicts it ended with: a new round supersedes nothing in it)
            if d.decided_at > since
            and d.superseded_at is None
            and not (d.decider_type == "agent" and d.decider_id == run.agent_profile_id)
        )
    comments: tuple[Comment, ...] = ()
    if news.comments:
        comments = tuple(c for c in _comments_since(host, run.task_id, since) if c.author != me)
    if not verdicts and not comments and conflict is None:
        return None
    return Feedback(since, verdicts, comments, conflict)


def _comments_since(host: AgentPort, task_id: str, since: str) -> list[Comment]:
    """The task's comments written after `since`, oldest first (the index on the task and
    the time reads those only)."""
    with host.store.read() as conn:
        found = prepared.execute(conn, _COMMENTS_SINCE, {"task_id": task_id, "since": since})
        return [rows.comment(r) for r in found.mappings()]


def _conflict(task: Task, since: str | None) -> Mapping[str, Any] | None:
    """The task's merge conflict recorded after `since` (any, for a first run), standing still
    (a merge that succeeded since clears it)."""
    record = task.workspace or {}
    conflict = record.get("conflict")
    if not isinstance(conflict, Mapping):
        return None
    if since is not None and str(conflict.get("at", "")) <= since:
        return None
    return conflict


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

        Merge conflict:
        - rebase onto main: conflicts in README.md, src/app.py
          ...what to do

        Comments on lines:
        - README.md:3: say what it does (alice)

    A verdict or comment of several lines continues indented by two spaces. Each text is cut
    to MAX_ENTRY characters and the block to MAX_BLOCK (oldest comments left out first; the
    merge conflict and the comments on lines come before them, so they are kept)."""
    on_lines = [
        f"- {c.file}:{c.line}: {_indented(cut_to(c.body, MAX_ENTRY))} ({c.author})"
        for c in feedback.comments
        if c.file is not None
    ]
    head_lines = [*_verdict_lines(feedback, step_names), *_conflict_lines(feedback)]
    if on_lines:
        head_lines += ["", "Comments on lines:", *on_lines]
    head = "\n".join(head_lines)
    comments = [
        f"- {c.author}: {_indented(cut_to(c.body, MAX_ENTRY))}"
        for c in feedback.comments
        if c.file is None
    ]
    # the newest comments that fit beside the verdicts and the notes (a line each, newline)
    room = MAX_BLOCK - len(head) - len("\n\nComments:") - 120
    kept = 0
    for line in reversed(comments):
        room -= len(line) + 1
        if room < 0:
            break
        kept += 1
    left_out = len(comments) - kept
    out = [head]
    if left_out:
        out += ["", f"({left_out} earlier comments left out: `laneway task comments` has them)"]
    if kept:
        out += ["", "Comments:", *comments[left_out:]]
    return cut_to("\n".join(out), MAX_BLOCK)


def _conflict_lines(feedback: Feedback) -> list[str]:
    if feedback.conflict is None:
        return []
    into = feedback.conflict.get("into", "the base branch")
    paths = ", ".join(str(p) for p in feedback.conflict.get("paths", ()))
    if feedback.conflict.get("strategy") == "rebase":
        # the rebase strategy replays the branch's own commits: a merge of the base into the
        # branch resolves nothing there, and would leave the agent conflicting for good
        todo = (
            f"  Your branch no longer rebases onto {into}. Rebase it (`git rebase {into}` in "
            f"your working directory; merging {into} into it does not help: your commits are "
            "replayed one by one), resolve those files and `git rebase --continue`; the merge "
            "runs again when the task next reaches its merge step."
        )
    else:
        todo = (
            f"  Your branch no longer merges into {into}. Bring {into} into it (`git rebase "
            f"{into}` or `git merge {into}` in your working directory), resolve those files "
            "and commit; the merge runs again when the task next reaches its merge step."
        )
    return ["", "Merge conflict:", f"- rebase onto {into}: conflicts in {paths}", todo]


def _verdict_lines(feedback: Feedback, step_names: dict[str, str]) -> list[str]:
    out = [HEADER]
    groups: dict[tuple[str, int], list[Decision]] = {}
    for d in sorted(feedback.verdicts, key=lambda d: (d.decided_at, d.id)):
        groups.setdefault((d.step_id, d.round), []).append(d)
    for (step_id, round_no), verdicts in groups.items():
        out.append("")
        out.append(f"Verdicts at {step_names.get(step_id, step_id)} (round {round_no}):")
        for d in verdicts:
            who = d.role or d.decider_type
            reason = f": {_indented(cut_to(d.comment, MAX_ENTRY))}" if d.comment.strip() else ""
            out.append(f"- {d.decision} by {who}{reason}")
    return out
