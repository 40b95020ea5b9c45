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
import functools
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


# The page's values, bound at each read: the statements of one shape of request are built once
# (`_shape` and the badge reads' builders below), so SQLAlchemy neither builds nor keys them
# anew per request (a third of a lane page's CPU; issue 45 item 5).
_WF = sa.bindparam("board_workflow", type_=sa.String)
_STEP = sa.bindparam("board_step", type_=sa.String)
_AFTER_AT = sa.bindparam("board_after_at", type_=sa.String)
_AFTER_ID = sa.bindparam("board_after_id", type_=sa.String)
_LAST_AT = sa.bindparam("board_last_at", type_=sa.String)
_LAST_ID = sa.bindparam("board_last_id", type_=sa.String)
_ORDER = (T.c.created_at, T.c.id)
_PROFILES = sa.select(t.agent_profiles.c.id, t.agent_profiles.c.name, t.agent_profiles.c.role)


@functools.lru_cache(maxsize=64)
def _shape(
    step: bool, q: str | None, after: bool, limit: int | None
) -> tuple[sa.Select[Any], sa.Select[Any], sa.Select[Any]]:
    """The page's cards, the ids of the whole page, and the ids of a page cut at its last
    card (`_LAST_AT`, `_LAST_ID`), for one shape of request."""
    where: list[sa.ColumnElement[bool]] = [T.c.workflow_id == _WF, T.c.archived_at.is_(None)]
    if step:
        where.append(T.c.workflow_step_id == _STEP)
    if q:
        where.append(
            sa.or_(
                T.c.title.icontains(q, autoescape=True),
                T.c.description.icontains(q, autoescape=True),
                T.c.id.endswith(q.strip().lower(), autoescape=True),
            )
        )
    if after:
        # a row-value comparison, so both databases seek the (…, created_at, id) index to the
        # cursor instead of walking every earlier row of the lane (migration 0018)
        where.append(sa.tuple_(T.c.created_at, T.c.id) > sa.tuple_(_AFTER_AT, _AFTER_ID))
    select = sa.select(T).where(*where).order_by(*_ORDER)
    ids = sa.select(T.c.id).where(*where)
    if limit is not None:
        select = select.limit(limit + 1)
        ids = ids.order_by(*_ORDER).limit(limit + 1)
    # The badge queries of a cut page read exactly it: the rows up to its last one.
    cut = sa.select(T.c.id).where(
        *where,
        sa.or_(
            T.c.created_at < _LAST_AT,
            sa.and_(T.c.created_at == _LAST_AT, T.c.id <= _LAST_ID),
        ),
    )
    return select, ids, cut


@attrs.frozen
class _Page:
    """The ids of the page's cards (a statement of `_shape`'s) and the values it is read with."""

    ids: sa.Select[Any]
    params: dict[str, Any]

    def read(
        self, conn: sa.Connection, build: Callable[[sa.Select[Any]], sa.Select[Any]]
    ) -> sa.CursorResult[*tuple[Any, ...]]:
        """`build`'s statement over this page's ids, built once per shape."""
        return conn.execute(_built(build, self.ids), self.params)


@functools.lru_cache(maxsize=256)
def _built(
    build: Callable[[sa.Select[Any]], sa.Select[Any]], ids: sa.Select[Any]
) -> sa.Select[Any]:
    return build(ids)


def read(
    conn: sa.Connection, wf: Workflow, query: BoardQuery, check: Callable[[], None]
) -> dict[str, Any]:
    """The board's answer: `{workflow, tasks, profiles, counts, next_cursor}`."""
    select, ids, cut = _shape(
        query.step_id is not None, query.q or None, query.after is not None, query.limit
    )
    params: dict[str, Any] = {_WF.key: wf.id, _STEP.key: query.step_id}
    if query.after is not None:
        params[_AFTER_AT.key], params[_AFTER_ID.key] = query.after
    result = conn.execute(select, params)
    keys = list(result.keys())
    # Plain dicts straight from the rows: building a Task and `plain` of it per card cost
    # more than every query of the board together.
    task_rows = [dict(zip(keys, row, strict=True)) for row in result.all()]
    next_cursor = None
    if query.limit is not None and len(task_rows) > query.limit:
        task_rows = task_rows[: query.limit]
        last = task_rows[-1]
        next_cursor = encode_cursor(last["created_at"], last["id"])
        ids = cut
        params[_LAST_AT.key], params[_LAST_ID.key] = last["created_at"], last["id"]
    page = _Page(ids, params)
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
        r["id"]: {"name": r["name"], "role": r["role"]} for r in conn.execute(_PROFILES).mappings()
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


def _runs_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    return (
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
    )


def _runs(conn: sa.Connection, page: _Page, badges: dict[str, dict[str, Any]]) -> None:
    found = page.read(conn, _runs_sql).mappings()
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


def _latest_runs_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    later = LATER
    return sa.select(R.c.task_id, R.c.status, R.c.error_message).where(
        R.c.task_id.in_(page),
        ~sa.exists().where(
            later.c.task_id == R.c.task_id,
            sa.tuple_(later.c.requested_at, later.c.id) > sa.tuple_(R.c.requested_at, R.c.id),
        ),
    )


def _latest_runs(conn: sa.Connection, page: _Page, badges: dict[str, dict[str, Any]]) -> None:
    """Each task's latest run (the last requested): its status (`last_run`), and its error
    when it failed (`last_error`). A failure a later run made good is history, not a badge:
    the demo's finished task does not keep a red error."""
    found = page.read(conn, _latest_runs_sql)
    for task_id, status, error in found:
        b = badges[task_id]
        b["last_run"] = status
        if status == "failed":
            b["last_error"] = error or "run failed"


def _blockers_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    blocker = BLOCKER
    return (
        sa.select(t.task_blockers.c.task_id, blocker.c.id, blocker.c.title, blocker.c.state)
        .join(blocker, blocker.c.id == t.task_blockers.c.blocker_id)
        .where(
            t.task_blockers.c.task_id.in_(page),
            blocker.c.state.not_in(sorted(TERMINAL_STATES)),
        )
        .order_by(t.task_blockers.c.created_at, blocker.c.id)
    )


def _subtasks_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    child = CHILD
    return (
        sa.select(child.c.parent_id, child.c.state, sa.func.count())
        .where(child.c.parent_id.in_(page), child.c.archived_at.is_(None))
        .group_by(child.c.parent_id, child.c.state)
    )


def _relations(conn: sa.Connection, page: _Page, badges: dict[str, dict[str, Any]]) -> None:
    """The blockers that still hold each task (`blockers`: id, title, state; finished ones
    left out) and how many of its subtasks are finished (`subtasks`: done, total)."""
    for task_id, b_id, title, state in page.read(conn, _blockers_sql):
        badges[task_id]["blockers"].append({"id": b_id, "title": title, "state": state})
    for parent_id, state, n in page.read(conn, _subtasks_sql):
        counted = badges[parent_id]["subtasks"]
        counted["total"] += int(n)
        if state in TERMINAL_STATES:
            counted["done"] += int(n)


def _sessions_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    # The order `session list` gives; the last row of a task is its latest session.
    return (
        sa.select(S.c.task_id, S.c.state)
        .where(S.c.task_id.in_(page))
        .order_by(S.c.task_id, S.c.started_at, S.c.id)
    )


def _sessions(conn: sa.Connection, page: _Page, badges: dict[str, dict[str, Any]]) -> None:
    found = page.read(conn, _sessions_sql)
    latest: dict[str, str] = {}
    for task_id, state in found:
        if state in WORKING_STATES:
            badges[task_id]["running"] = True
        latest[task_id] = state
    for task_id, state in latest.items():
        badges[task_id]["dead_session"] = state == "FAILED"


def _open_entries_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    # `terminal IS false` exactly: the partial index of pending entries answers it.
    return sa.select(E.c.task_id).where(E.c.terminal.is_(False), E.c.task_id.in_(page)).distinct()


def _entries_here_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    return (
        sa.select(E.c.id, E.c.task_id, E.c.entry_seq)
        .join(T, sa.and_(T.c.id == E.c.task_id, T.c.workflow_step_id == E.c.step_id))
        .where(E.c.task_id.in_(page))
    )


def _failed_markers_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    here = _entries_here_sql(page)
    return (
        sa.select(M.c.entry_id)
        .where(M.c.state == "failed", M.c.entry_id.in_(here.with_only_columns(E.c.id)))
        .distinct()
    )


def _entries(conn: sa.Connection, page: _Page, badges: dict[str, dict[str, Any]]) -> None:
    for (task_id,) in page.read(conn, _open_entries_sql):
        badges[task_id]["open_entry"] = True
    latest: dict[str, tuple[int, str]] = {}
    for entry_id, task_id, seq in page.read(conn, _entries_here_sql):
        if task_id not in latest or seq > latest[task_id][0]:
            latest[task_id] = (seq, entry_id)
    if not latest:
        return
    failed = {entry_id for (entry_id,) in page.read(conn, _failed_markers_sql)}
    for task_id, (_seq, entry_id) in latest.items():
        badges[task_id]["failed_marker"] = entry_id in failed


def _own_seats_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    return (
        sa.select(P.c.id, P.c.task_id, P.c.role, P.c.agent_profile_id, P.c.decision_required)
        .join(T, sa.and_(T.c.id == P.c.task_id, T.c.workflow_step_id == P.c.step_id))
        .where(P.c.task_id.in_(page))
    )


def _approvals_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    return (
        sa.select(D.c.task_id, D.c.participant_id)
        .join(T, sa.and_(T.c.id == D.c.task_id, T.c.workflow_step_id == D.c.step_id))
        .where(
            D.c.task_id.in_(page),
            D.c.cleared_at.is_(None),
            D.c.superseded_at.is_(None),
            D.c.decision == "approved",
        )
    )


def _decisions(
    conn: sa.Connection,
    wf: Workflow,
    page: _Page,
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
    for r in page.read(conn, _own_seats_sql).mappings():
        own.setdefault(r["task_id"], []).append(
            (r["id"], r["role"], r["agent_profile_id"], bool(r["decision_required"]))
        )
    approved: dict[str, set[str]] = {}
    for task_id, participant_id in page.read(conn, _approvals_sql):
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


def _person_waits_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    waits = t.person_waits
    return (
        sa.select(waits.c.task_id, waits.c.reason)
        .where(waits.c.task_id.in_(page))
        .order_by(waits.c.task_id, waits.c.reason)
    )


def _person_waits(conn: sa.Connection, page: _Page, badges: dict[str, dict[str, Any]]) -> None:
    """Why a task waits for a person beyond a permission (core.store.waits): `failure`,
    `blocked`; the page counts these tasks in its tab title."""
    for task_id, reason in page.read(conn, _person_waits_sql):
        badges[task_id]["needs_person"].append(reason)


def _pending_permissions_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    return (
        sa.select(PERM.c.task_id)
        .where(PERM.c.state == "pending", PERM.c.task_id.in_(page))
        .distinct()
    )


def _pending_questions_sql(page: sa.Select[Any]) -> sa.Select[Any]:
    return (
        sa.select(Q.c.task_id, sa.func.count())
        .where(Q.c.state == "pending", Q.c.task_id.in_(page))
        .group_by(Q.c.task_id)
    )


def _permissions(conn: sa.Connection, page: _Page, badges: dict[str, dict[str, Any]]) -> None:
    for (task_id,) in page.read(conn, _pending_permissions_sql):
        badges[task_id]["waiting_for_person"] = True
    # an agent's pending questions (issue 41 item 6): the card says its agent asks one
    for task_id, asked in page.read(conn, _pending_questions_sql):
        badges[task_id]["waiting_for_person"] = True
        badges[task_id]["questions"] = int(asked)
