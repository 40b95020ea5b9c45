"""The board page's read model (`GET /api/board`): a workflow's tasks with the badges a card
shows, read with one set-based query per badge, whatever the number of cards.

Each query reads the same set of tasks (the page: the workflow's unarchived tasks, narrowed by
`?step=`, `?q=` and a cursor) as a subquery, all in one read transaction, so a board of 10,000
cards costs about ten statements instead of several per card. Between statements the caller's
`check` runs: a request whose client went away stops there instead of reading on.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from collections.abc import Callable, Iterable
from typing import Any, Final

import attrs
import sqlalchemy as sa

from core.model import WORKING_STATES, Workflow
from core.outbox import TERMINAL_STATES
from core.runs import pinned_host
from core.shapes import workflow_json
from core.store import tables as t

T = t.tasks
R = t.runs
S = t.task_sessions
E = t.step_entries
M = t.step_entry_markers
P = t.workflow_step_participants
D = t.workflow_step_decisions
PERM = t.permissions
Q = t.questions

# Aliases built once: each one copies its table's columns, per request otherwise.
LATER = R.alias("later")
BLOCKER = T.alias("blocker")
CHILD = T.alias("child")

MAX_LIMIT: Final = 1000
RUN_STATES: Final = ("claimed", "dead", "failed", "queued")


class BadCursor(ValueError):
    """A `?cursor=` this server did not hand out."""


@attrs.frozen
class BoardQuery:
    """What `GET /api/board` was asked for: a step (id), a search, a page size and where the
    previous page ended."""

    step_id: str | None = None
    q: str | None = None
    limit: int | None = None
    after: tuple[str, str] | None = None
    counts: bool = True
    """False (`?counts=0`): the lane counts are not read (`counts` is null). The page reads
    them once per load, not once per lane: they count the whole workflow (issue 45 item 5)."""


def encode_cursor(created_at: str, task_id: str) -> str:
    raw = json.dumps([created_at, task_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError):
        raise BadCursor(text) from None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, str) and "\x00" not in v for v in value)
    ):
        raise BadCursor(text)
    return value[0], value[1]


def _tasks_where(wf: Workflow, query: BoardQuery) -> list[sa.ColumnElement[bool]]:
    where: list[sa.ColumnElement[bool]] = [T.c.workflow_id == wf.id, T.c.archived_at.is_(None)]
    if query.step_id is not None:
        where.append(T.c.workflow_step_id == query.step_id)
    if query.q:
        where.append(
            sa.or_(
                T.c.title.icontains(query.q, autoescape=True),
                T.c.description.icontains(query.q, autoescape=True),
                T.c.id.endswith(query.q.strip().lower(), autoescape=True),
            )
        )
    return where


def read(
    conn: sa.Connection, wf: Workflow, query: BoardQuery, check: Callable[[], None]
) -> dict[str, Any]:
    """The board's answer: `{workflow, tasks, profiles, counts, next_cursor}`."""
    where = _tasks_where(wf, query)
    order = (T.c.created_at, T.c.id)
    paged = list(where)
    if query.after is not None:
        at, last_id = query.after
        # a row-value comparison, so both databases seek the (…, created_at, id) index to the
        # cursor instead of walking every earlier row of the lane (migration 0018)
        paged.append(sa.tuple_(T.c.created_at, T.c.id) > sa.tuple_(at, last_id))
    select = sa.select(T).where(*paged).order_by(*order)
    ids = sa.select(T.c.id).where(*paged)
    if query.limit is not None:
        select = select.limit(query.limit + 1)
        ids = ids.order_by(*order).limit(query.limit + 1)
    result = conn.execute(select)
    keys = list(result.keys())
    # Plain dicts straight from the rows: building a Task and `plain` of it per card cost
    # more than every query of the board together.
    task_rows = [dict(zip(keys, row, strict=True)) for row in result.all()]
    next_cursor = None
    if query.limit is not None and len(task_rows) > query.limit:
        task_rows = task_rows[: query.limit]
        last = task_rows[-1]
        next_cursor = encode_cursor(last["created_at"], last["id"])
        # The badge queries read exactly this page: the rows up to its last one.
        ids = sa.select(T.c.id).where(
            *paged,
            sa.or_(
                T.c.created_at < last["created_at"],
                sa.and_(T.c.created_at == last["created_at"], T.c.id <= last["id"]),
            ),
        )
    page = ids
    check()
    badges = {r["id"]: _empty_badges() for r in task_rows}
    if task_rows:
        _runs(conn, page, badges)
        check()
        _sessions(conn, page, badges)
        check()
        _entries(conn, page, badges)
        check()
        step_of = {r["id"]: r["workflow_step_id"] for r in task_rows if r["workflow_step_id"]}
        _decisions(conn, wf, page, step_of, badges)
        check()
        _permissions(conn, page, badges)
        _person_waits(conn, page, badges)
        check()
        _latest_runs(conn, page, badges)
        check()
        _relations(conn, page, badges)
        check()
    for card in task_rows:
        card["wip_admitted"] = bool(card["wip_admitted"])
        card["is_ephemeral"] = bool(card["is_ephemeral"])
        card["workspace"] = json.loads(card["workspace"]) if card["workspace"] else None
        card["blocked_by"] = json.loads(card["blocked_by"]) if card["blocked_by"] else []
        card["badges"] = badges[card["id"]]
    profiles = {
        r["id"]: {"name": r["name"], "role": r["role"]}
        for r in conn.execute(
            sa.select(t.agent_profiles.c.id, t.agent_profiles.c.name, t.agent_profiles.c.role)
        ).mappings()
    }
    return {
        "workflow": workflow_json(wf),
        "tasks": task_rows,
        "profiles": profiles,
        "counts": _counts(conn, wf, query) if query.counts else None,
        "next_cursor": next_cursor,
        "step_agents": _step_agents(conn, wf),
    }


def _step_agents(conn: sa.Connection, wf: Workflow) -> dict[str, str | None]:
    """Per step, the agent `task start` would put on a task arriving there with no seats of
    its own: the step's first runner seat, else the step's agent, else the workflow's (as
    `RunService.primary_agent` resolves it). The page asks whether to start it after a drop."""
    runners: dict[str, str] = {}
    for step_id, agent in conn.execute(
        sa.select(P.c.step_id, P.c.agent_profile_id)
        .where(
            P.c.step_id.in_([s.id for s in wf.steps]),
            P.c.task_id == "",
            P.c.role == "runner",
        )
        .order_by(P.c.position, P.c.id)
    ):
        runners.setdefault(step_id, agent)
    return {
        s.id: runners.get(s.id) or s.agent_profile_id or wf.agent_profile_id or None
        for s in wf.steps
    }


def _empty_badges() -> dict[str, Any]:
    return {
        "running": False,
        "decisions": {"approved": 0, "required": 0},
        "open_entry": False,
        "failed_marker": False,
        "dead_session": False,
        "dead_run": False,
        "waiting_for_person": False,
        "needs_person": [],
        "questions": 0,
        "queued": False,
        "queued_behind": 0,
        "waits_for_host": None,
        "last_error": None,
        "last_run": None,
        "blockers": [],
        "subtasks": {"done": 0, "total": 0},
    }


def _counts(conn: sa.Connection, wf: Workflow, query: BoardQuery) -> dict[str, dict[str, int]]:
    """Per step, how many of the (searched) tasks stand there admitted and queued: the lane
    headers' numbers, whichever page the client has loaded."""
    where = _tasks_where(wf, attrs.evolve(query, step_id=None))
    found = conn.execute(
        sa.select(T.c.workflow_step_id, T.c.wip_admitted, sa.func.count())
        .where(*where)
        .group_by(T.c.workflow_step_id, T.c.wip_admitted)
    )
    counts: dict[str, dict[str, int]] = {}
    for step_id, admitted, n in found:
        if step_id is None:
            continue
        lane = counts.setdefault(step_id, {"admitted": 0, "queued": 0})
        lane["admitted" if admitted else "queued"] += int(n)
    return counts


def _runs(conn: sa.Connection, page: sa.Select[Any], badges: dict[str, dict[str, Any]]) -> None:
    found = conn.execute(
        sa.select(
            R.c.task_id,
            R.c.status,
            R.c.agent_profile_id,
            R.c.requested_at,
            R.c.id,
            R.c.error_message,
        )
        # `status || ''`: the status is kept out of the index choice. SQLite, which keeps no
        # statistics, otherwise walks the queue index (status, requested_at, id) over every
        # run of those states on the board instead of the page's runs by task (4 ms of a
        # lane's 200 cards at 100,000 tasks, against 0.1 ms; issue 45 item 5).
        .where(R.c.task_id.in_(page), (R.c.status + "").in_(RUN_STATES))
        .order_by(R.c.requested_at, R.c.id)
    ).mappings()
    first_queued: dict[str, tuple[str, str, str]] = {}
    for r in found:
        b = badges[r["task_id"]]
        status = r["status"]
        if status == "claimed":
            b["running"] = True
        elif status == "dead":
            b["dead_run"] = True
        elif status == "queued":
            b["queued"] = True
        if status == "queued" and r["task_id"] not in first_queued:
            first_queued[r["task_id"]] = (r["agent_profile_id"], r["requested_at"], r["id"])
    if first_queued:
        _queued_behind(conn, first_queued, badges)
        _waits_for_host(conn, sorted(first_queued), badges)


def _waits_for_host(
    conn: sa.Connection, task_ids: list[str], badges: dict[str, dict[str, Any]]
) -> None:
    """The host whose workers alone may take each queued task's runs (`core.runs.pinned_host`):
    the card's "waits for a worker on alpha"."""
    W = t.workflows
    for task_id, workspace, remote in conn.execute(
        sa.select(T.c.id, T.c.workspace, W.c.remote)
        .select_from(T.outerjoin(W, W.c.id == T.c.workflow_id))
        .where(T.c.id.in_(task_ids), T.c.workspace.is_not(None))
    ):
        badges[task_id]["waits_for_host"] = pinned_host(workspace, remote)


def _queued_behind(
    conn: sa.Connection,
    first_queued: dict[str, tuple[str, str, str]],
    badges: dict[str, dict[str, Any]],
) -> None:
    """How many queued runs of the same agent stand ahead of each task's first queued run, in
    the order workers claim them (requested_at, id): one read of the queue for those agents."""
    agents = {agent for agent, _at, _id in first_queued.values()}
    # No run queued after the page's last first-queued one stands ahead of any of them: the
    # queue is read up to there only, not to its end (a lane's first cards, oldest first, are
    # near the head of a queue thousands long; issue 45 item 5).
    last_at, last_id = max((at, run_id) for _agent, at, run_id in first_queued.values())
    queue: dict[str, list[tuple[str, str]]] = {}
    for agent, at, run_id in conn.execute(
        sa.select(R.c.agent_profile_id, R.c.requested_at, R.c.id)
        .where(
            R.c.status == "queued",
            R.c.agent_profile_id.in_(sorted(agents)),
            sa.or_(
                R.c.requested_at < last_at,
                sa.and_(R.c.requested_at == last_at, R.c.id <= last_id),
            ),
        )
        .order_by(R.c.requested_at, R.c.id)
    ):
        queue.setdefault(agent, []).append((at, run_id))
    for task_id, (agent, at, run_id) in first_queued.items():
        badges[task_id]["queued_behind"] = bisect.bisect_left(queue.get(agent, []), (at, run_id))


def _latest_runs(
    conn: sa.Connection, page: sa.Select[Any], badges: dict[str, dict[str, Any]]
) -> None:
    """Each task's latest run (the last requested): its status (`last_run`), and its error
    when it failed (`last_error`). A failure a later run made good is history, not a badge:
    the demo's finished task does not keep a red error."""
    later = LATER
    found = conn.execute(
        sa.select(R.c.task_id, R.c.status, R.c.error_message).where(
            R.c.task_id.in_(page),
            ~sa.exists().where(
                later.c.task_id == R.c.task_id,
                sa.tuple_(later.c.requested_at, later.c.id) > sa.tuple_(R.c.requested_at, R.c.id),
            ),
        )
    )
    for task_id, status, error in found:
        b = badges[task_id]
        b["last_run"] = status
        if status == "failed":
            b["last_error"] = error or "run failed"


def _relations(
    conn: sa.Connection, page: sa.Select[Any], badges: dict[str, dict[str, Any]]
) -> None:
    """The blockers that still hold each task (`blockers`: id, title, state; finished ones
    left out) and how many of its subtasks are finished (`subtasks`: done, total)."""
    blocker = BLOCKER
    for task_id, b_id, title, state in conn.execute(
        sa.select(t.task_blockers.c.task_id, blocker.c.id, blocker.c.title, blocker.c.state)
        .join(blocker, blocker.c.id == t.task_blockers.c.blocker_id)
        .where(
            t.task_blockers.c.task_id.in_(page),
            blocker.c.state.not_in(sorted(TERMINAL_STATES)),
        )
        .order_by(t.task_blockers.c.created_at, blocker.c.id)
    ):
        badges[task_id]["blockers"].append({"id": b_id, "title": title, "state": state})
    child = CHILD
    for parent_id, state, n in conn.execute(
        sa.select(child.c.parent_id, child.c.state, sa.func.count())
        .where(child.c.parent_id.in_(page), child.c.archived_at.is_(None))
        .group_by(child.c.parent_id, child.c.state)
    ):
        counted = badges[parent_id]["subtasks"]
        counted["total"] += int(n)
        if state in TERMINAL_STATES:
            counted["done"] += int(n)


def _sessions(conn: sa.Connection, page: sa.Select[Any], badges: dict[str, dict[str, Any]]) -> None:
    # The order `session list` gives; the last row of a task is its latest session.
    found = conn.execute(
        sa.select(S.c.task_id, S.c.state)
        .where(S.c.task_id.in_(page))
        .order_by(S.c.task_id, S.c.started_at, S.c.id)
    )
    latest: dict[str, str] = {}
    for task_id, state in found:
        if state in WORKING_STATES:
            badges[task_id]["running"] = True
        latest[task_id] = state
    for task_id, state in latest.items():
        badges[task_id]["dead_session"] = state == "FAILED"


def _entries(conn: sa.Connection, page: sa.Select[Any], badges: dict[str, dict[str, Any]]) -> None:
    # `terminal IS false` exactly: the partial index of pending entries answers it.
    for (task_id,) in conn.execute(
        sa.select(E.c.task_id).where(E.c.terminal.is_(False), E.c.task_id.in_(page)).distinct()
    ):
        badges[task_id]["open_entry"] = True
    here = (
        sa.select(E.c.id, E.c.task_id, E.c.entry_seq)
        .join(T, sa.and_(T.c.id == E.c.task_id, T.c.workflow_step_id == E.c.step_id))
        .where(E.c.task_id.in_(page))
    )
    latest: dict[str, tuple[int, str]] = {}
    for entry_id, task_id, seq in conn.execute(here):
        if task_id not in latest or seq > latest[task_id][0]:
            latest[task_id] = (seq, entry_id)
    if not latest:
        return
    failed = {
        entry_id
        for (entry_id,) in conn.execute(
            sa.select(M.c.entry_id)
            .where(M.c.state == "failed", M.c.entry_id.in_(here.with_only_columns(E.c.id)))
            .distinct()
        )
    }
    for task_id, (_seq, entry_id) in latest.items():
        badges[task_id]["failed_marker"] = entry_id in failed


def _decisions(
    conn: sa.Connection,
    wf: Workflow,
    page: sa.Select[Any],
    step_of: dict[str, str],
    badges: dict[str, dict[str, Any]],
) -> None:
    """Approved / required at each task's current step over its merged seats (the template's
    seats, each replaced by the task's own seat with the same role and agent)."""
    template: dict[str, list[tuple[str, str, str, bool]]] = {}
    for r in conn.execute(
        sa.select(P.c.id, P.c.step_id, P.c.role, P.c.agent_profile_id, P.c.decision_required)
        .where(P.c.task_id == "", P.c.step_id.in_([s.id for s in wf.steps]))
        .order_by(P.c.id)
    ).mappings():
        template.setdefault(r["step_id"], []).append(
            (r["id"], r["role"], r["agent_profile_id"], bool(r["decision_required"]))
        )
    own: dict[str, list[tuple[str, str, str, bool]]] = {}
    for r in conn.execute(
        sa.select(P.c.id, P.c.task_id, P.c.role, P.c.agent_profile_id, P.c.decision_required)
        .join(T, sa.and_(T.c.id == P.c.task_id, T.c.workflow_step_id == P.c.step_id))
        .where(P.c.task_id.in_(page))
    ).mappings():
        own.setdefault(r["task_id"], []).append(
            (r["id"], r["role"], r["agent_profile_id"], bool(r["decision_required"]))
        )
    approved: dict[str, set[str]] = {}
    for task_id, participant_id in conn.execute(
        sa.select(D.c.task_id, D.c.participant_id)
        .join(T, sa.and_(T.c.id == D.c.task_id, T.c.workflow_step_id == D.c.step_id))
        .where(
            D.c.task_id.in_(page),
            D.c.cleared_at.is_(None),
            D.c.superseded_at.is_(None),
            D.c.decision == "approved",
        )
    ):
        approved.setdefault(task_id, set()).add(participant_id)
    for task_id, step_id in step_of.items():
        if step_id not in template and task_id not in own:
            continue
        seats = _merged(template.get(step_id, ()), own.get(task_id, ()))
        deciding = [seat_id for seat_id, required in seats if required]
        yes = approved.get(task_id, set())
        badges[task_id]["decisions"] = {
            "approved": sum(1 for seat_id in deciding if seat_id in yes),
            "required": len(deciding),
        }


def _merged(
    template: Iterable[tuple[str, str, str, bool]], own: Iterable[tuple[str, str, str, bool]]
) -> list[tuple[str, bool]]:
    mine = list(own)
    taken = {(role, agent) for _id, role, agent, _req in mine}
    kept = [(i, req) for i, role, agent, req in template if (role, agent) not in taken]
    return kept + [(i, req) for i, _role, _agent, req in mine]


def _person_waits(
    conn: sa.Connection, page: sa.Select[Any], badges: dict[str, dict[str, Any]]
) -> None:
    """Why a task waits for a person beyond a permission (core.store.waits): `failure`,
    `blocked`; the page counts these tasks in its tab title."""
    waits = t.person_waits
    for task_id, reason in conn.execute(
        sa.select(waits.c.task_id, waits.c.reason)
        .where(waits.c.task_id.in_(page))
        .order_by(waits.c.task_id, waits.c.reason)
    ):
        badges[task_id]["needs_person"].append(reason)


def _permissions(
    conn: sa.Connection, page: sa.Select[Any], badges: dict[str, dict[str, Any]]
) -> None:
    for (task_id,) in conn.execute(
        sa.select(PERM.c.task_id)
        .where(PERM.c.state == "pending", PERM.c.task_id.in_(page))
        .distinct()
    ):
        badges[task_id]["waiting_for_person"] = True
    # an agent's pending questions (issue 41 item 6): the card says its agent asks one
    for task_id, asked in conn.execute(
        sa.select(Q.c.task_id, sa.func.count())
        .where(Q.c.state == "pending", Q.c.task_id.in_(page))
        .group_by(Q.c.task_id)
    ):
        badges[task_id]["waiting_for_person"] = True
        badges[task_id]["questions"] = int(asked)
