"""The board page's read model (`GET /api/board`): a workflow's tasks with the badges a card
shows, in a fixed number of statements whatever the number of cards.

The page (the workflow's unarchived tasks, narrowed by `?step=`, `?q=` and a cursor) is read
first; then one statement reads every badge row of those tasks, each badge's read a branch of
a UNION ALL over the page as a common table expression (read once), with the board's seats and
profiles beside; a third reads the run queue ahead of the page's queued cards, when it has
any. All in one read transaction: a lane's 200 cards at 100,000 tasks are 3 statements (19
before, issue 45 item 5). Between statements the caller's `check` runs: a request whose client
went away stops there instead of reading on. `encode` writes the answer's JSON.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final

import attrs
import sqlalchemy as sa

from core.model import WORKING_STATES, Workflow
from core.outbox import TERMINAL_STATES
from core.runs import pinned_host
from core.shapes import plain, workflow_json
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


_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=plain
)
"""The board answer's JSON, as the API's other answers are written (Starlette's `JSONResponse`
settings). `default=plain` meets what is not JSON already (an attrs value of a workflow's)."""


def encode(view: dict[str, Any]) -> bytes:
    """`read`'s answer as JSON, written straight from the plain dicts and lists it is: a
    lane's 200 cards went through `plain` first, a copy of every value, a third of the
    answer's CPU (issue 45 item 5)."""
    try:
        return _ENCODER.encode(view).encode()
    except ValueError:  # a number JSON has no word for: `plain` writes it as null
        return _ENCODER.encode(plain(view)).encode()


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
# (`_statements`), so SQLAlchemy neither builds nor keys them
# anew per request (a third of a lane page's CPU; issue 45 item 5).
_WF = sa.bindparam("board_workflow", type_=sa.String)
_STEP = sa.bindparam("board_step", type_=sa.String)
_AFTER_AT = sa.bindparam("board_after_at", type_=sa.String)
_AFTER_ID = sa.bindparam("board_after_id", type_=sa.String)
_LAST_AT = sa.bindparam("board_last_at", type_=sa.String)
_LAST_ID = sa.bindparam("board_last_id", type_=sa.String)
_ORDER = (T.c.created_at, T.c.id)


def _shape(
    step: bool, q: str | None, after: bool, limit: int | None
) -> tuple[sa.Select[Any], sa.Select[Any], sa.Select[Any]]:
    """The page's cards, the (id, step) of the whole page, and those of a page cut at its last
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
    # the ids with each card's step: the badges of its current step are matched on both
    ids = sa.select(T.c.id, T.c.workflow_step_id.label("step_id")).where(*where)
    if limit is not None:
        select = select.limit(limit + 1)
        ids = ids.order_by(*_ORDER).limit(limit + 1)
    # The badge queries of a cut page read exactly it: the rows up to its last one.
    cut = sa.select(T.c.id, T.c.workflow_step_id.label("step_id")).where(
        *where,
        sa.or_(
            T.c.created_at < _LAST_AT,
            sa.and_(T.c.created_at == _LAST_AT, T.c.id <= _LAST_ID),
        ),
    )
    return select, ids, cut


_BUILDING = threading.Lock()


@attrs.frozen
class _Page:
    """One shape of request's statements (`_shape`, `_badges`)."""

    cards: sa.Select[Any]
    badges: sa.CompoundSelect[Any]
    """The badge read of a page that is not cut."""
    cut_badges: sa.CompoundSelect[Any]
    """The badge read of a page cut at its last card."""


@functools.lru_cache(maxsize=64)
def _statements(
    dialect: sa.Dialect, step: bool, q: str | None, after: bool, limit: int | None
) -> _Page:
    """`_shape`'s statements and their badge reads (`_badges`), built and compiled under a lock
    before the cache hands them to any request. SQLAlchemy fills a statement's derived parts
    (its FROM list, its joins' sides) as it first compiles it: a page's lanes, asked for at
    once, compiled one new badge read on several threads together, and now and then one of
    them found a join's left side ambiguous (an answer of 500)."""
    with _BUILDING:
        cards, ids, cut = _shape(step, q, after, limit)
        arrays = dialect.name == "postgresql"
        page = _Page(cards, _badges(ids, arrays=arrays), _badges(cut, arrays=arrays))
        for statement in (page.cards, page.badges, page.cut_badges):
            statement.compile(dialect=dialect)
    return page


# What each row of the badge read (`_badges`) is: its first column.
RUN, SESSION, OPEN_ENTRY, ENTRY_HERE, FAILED_MARKER, SEAT, OWN_SEAT = 1, 2, 3, 4, 5, 6, 7
APPROVAL, PERMISSION, QUESTION, PERSON_WAIT, LATEST_RUN, BLOCKER_ROW, SUBTASKS = range(8, 15)
PROFILE: Final = 15
_TEXTS: Final = ("task_id", "a", "b", "c", "d", "e")
_NUMBERS: Final = ("n", "p")
_KEYS: Final = ("s1", "s2", "s3")
_STEPS: sa.BindParameter[Any] = sa.bindparam("board_steps", expanding=True)


def _row(kind: int, **given: Any) -> sa.Select[Any]:
    """One branch of the badge read: `kind`, then the same typed columns in every branch
    (a NULL typed too: PostgreSQL types a UNION's column pairwise, and NULL beside NULL
    would be text against a later branch's integer). `p`, then `s1`..`s3`, order the rows of a
    kind."""
    columns: list[sa.ColumnElement[Any]] = [sa.literal_column(str(kind), sa.Integer).label("kind")]
    for name in (*_TEXTS, *_NUMBERS, *_KEYS):
        value = given.pop(name, None)
        if value is None:
            value = sa.cast(sa.null(), sa.Integer if name in _NUMBERS else sa.String)
        columns.append(value.label(name))
    assert not given, given
    return sa.select(*columns)


def _badges(ids: sa.Select[Any], *, arrays: bool = False) -> sa.CompoundSelect[Any]:
    """Every badge row of a page (`ids`, read once as a common table expression) and the
    board's seats and profiles, as one statement: each was a statement of its own, 18 for a
    lane's page, each with its own round through SQLAlchemy and a fresh read of the page
    (issue 45 item 5).

    `arrays` (PostgreSQL): a row of the page's tasks is found as `task_id = ANY(the page's ids
    as one array)`, not `task_id IN (SELECT … FROM the page)`. Given the IN, PostgreSQL's
    planner weighs a hash join over the whole table against a probe of the index per card, and
    from a few thousand rows chose the scan: at 100,000 tasks (10,000 runs) the badge read
    took 12 ms of a lane page's 23, and more as the tables grow. An array it can only probe
    the index with (2.5 ms there, whatever the tables' sizes)."""
    page = ids.cte("board_page")
    # (task, its current step): a row of the step the card stands at, matched on the
    # tables' (task_id, step_id) indexes without a second look at the task
    at_step = sa.select(page.c.id, page.c.step_id)
    if arrays:
        page_ids = sa.cast(
            sa.select(sa.func.array_agg(page.c.id)).scalar_subquery(), sa.ARRAY(sa.String)
        )

        def in_page(column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
            return column == sa.any_(page_ids)
    else:
        on_page = sa.select(page.c.id)

        def in_page(column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
            return column.in_(on_page)

    def at_page_step(
        task: sa.ColumnElement[Any], step: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[bool]:
        pair = sa.tuple_(task, step).in_(at_step)
        return sa.and_(in_page(task), pair) if arrays else pair

    waits = t.person_waits
    blocker = BLOCKER
    child = CHILD
    later = LATER
    here_entries = sa.select(E.c.id).where(at_page_step(E.c.task_id, E.c.step_id))
    branches = [
        # RUN_STATES' runs, oldest first (`status || ''`: the status is kept out of the index
        # choice; SQLite, which keeps no statistics, otherwise walks the queue index over
        # every run of those states on the board instead of the page's runs by task)
        _row(
            RUN,
            task_id=R.c.task_id,
            a=R.c.status,
            b=R.c.agent_profile_id,
            c=R.c.requested_at,
            d=R.c.id,
            s1=R.c.requested_at,
            s2=R.c.id,
        ).where(in_page(R.c.task_id), (R.c.status + "").in_(RUN_STATES)),
        # sessions in the order `session list` gives: a task's last is its latest
        _row(
            SESSION, task_id=S.c.task_id, a=S.c.state, s1=S.c.task_id, s2=S.c.started_at, s3=S.c.id
        ).where(in_page(S.c.task_id)),
        # `terminal IS false` exactly: the partial index of pending entries answers it
        _row(OPEN_ENTRY, task_id=E.c.task_id).where(E.c.terminal.is_(False), in_page(E.c.task_id)),
        _row(ENTRY_HERE, task_id=E.c.task_id, a=E.c.id, n=E.c.entry_seq).where(
            at_page_step(E.c.task_id, E.c.step_id)
        ),
        _row(FAILED_MARKER, a=M.c.entry_id).where(
            M.c.state == "failed", M.c.entry_id.in_(here_entries)
        ),
        # the template's seats of the workflow's steps, by position (the runners' order)
        _row(
            SEAT,
            a=P.c.id,
            b=P.c.step_id,
            c=P.c.role,
            d=P.c.agent_profile_id,
            n=sa.cast(P.c.decision_required, sa.Integer),
            p=P.c.position,
            s1=P.c.id,
        ).where(P.c.task_id == "", P.c.step_id.in_(_STEPS)),
        _row(
            OWN_SEAT,
            task_id=P.c.task_id,
            a=P.c.id,
            c=P.c.role,
            d=P.c.agent_profile_id,
            n=sa.cast(P.c.decision_required, sa.Integer),
        ).where(at_page_step(P.c.task_id, P.c.step_id)),
        _row(APPROVAL, task_id=D.c.task_id, a=D.c.participant_id).where(
            at_page_step(D.c.task_id, D.c.step_id),
            D.c.cleared_at.is_(None),
            D.c.superseded_at.is_(None),
            D.c.decision == "approved",
        ),
        _row(PERMISSION, task_id=PERM.c.task_id).where(
            PERM.c.state == "pending", in_page(PERM.c.task_id)
        ),
        _row(QUESTION, task_id=Q.c.task_id, n=sa.func.count())
        .where(Q.c.state == "pending", in_page(Q.c.task_id))
        .group_by(Q.c.task_id),
        _row(
            PERSON_WAIT,
            task_id=waits.c.task_id,
            a=waits.c.reason,
            s1=waits.c.task_id,
            s2=waits.c.reason,
        ).where(in_page(waits.c.task_id)),
        # each task's latest run (the last requested)
        _row(LATEST_RUN, task_id=R.c.task_id, a=R.c.status, e=R.c.error_message).where(
            in_page(R.c.task_id),
            ~sa.exists().where(
                later.c.task_id == R.c.task_id,
                sa.tuple_(later.c.requested_at, later.c.id) > sa.tuple_(R.c.requested_at, R.c.id),
            ),
        ),
        _row(
            BLOCKER_ROW,
            task_id=t.task_blockers.c.task_id,
            a=blocker.c.id,
            b=blocker.c.title,
            c=blocker.c.state,
            s1=t.task_blockers.c.created_at,
            s2=blocker.c.id,
        )
        # the join named whole: left to infer its left side, SQLAlchemy found both tables of
        # the branch able to join `blocker` and refused now and then (an answer of 500)
        .select_from(t.task_blockers.join(blocker, blocker.c.id == t.task_blockers.c.blocker_id))
        .where(
            in_page(t.task_blockers.c.task_id),
            blocker.c.state.not_in(sorted(TERMINAL_STATES)),
        ),
        _row(SUBTASKS, task_id=child.c.parent_id, a=child.c.state, n=sa.func.count())
        .where(in_page(child.c.parent_id), child.c.archived_at.is_(None))
        .group_by(child.c.parent_id, child.c.state),
        _row(
            PROFILE,
            a=t.agent_profiles.c.id,
            b=t.agent_profiles.c.name,
            c=t.agent_profiles.c.role,
        ),
    ]
    union = sa.union_all(*branches)
    order = union.selected_columns
    return union.order_by(order.kind, order.p, order.s1, order.s2, order.s3)


def read(
    conn: sa.Connection, wf: Workflow, query: BoardQuery, check: Callable[[], None]
) -> dict[str, Any]:
    """The board's answer: `{workflow, tasks, profiles, counts, next_cursor, step_agents}`.

    Two statements whatever the page (three when a card has a queued run): its cards, then
    every badge row of them with the board's seats and profiles (`_badges`)."""
    page = _statements(
        conn.dialect,
        query.step_id is not None,
        query.q or None,
        query.after is not None,
        query.limit,
    )
    badges_read = page.badges
    params: dict[str, Any] = {_WF.key: wf.id, _STEP.key: query.step_id}
    if query.after is not None:
        params[_AFTER_AT.key], params[_AFTER_ID.key] = query.after
    result = conn.execute(page.cards, params)
    keys = list(result.keys())
    # Plain dicts straight from the rows: building a Task and `plain` of it per card cost
    # more than every query of the board together.
    task_rows = [dict(zip(keys, row, strict=True)) for row in result.all()]
    next_cursor = None
    if query.limit is not None and len(task_rows) > query.limit:
        task_rows = task_rows[: query.limit]
        last = task_rows[-1]
        next_cursor = encode_cursor(last["created_at"], last["id"])
        badges_read = page.cut_badges  # a cut page's badge rows: exactly its rows, up to its last
        params[_LAST_AT.key], params[_LAST_ID.key] = last["created_at"], last["id"]
    check()
    params[_STEPS.key] = [s.id for s in wf.steps]
    rows = conn.execute(badges_read, params).all()
    check()
    badges = {r["id"]: _empty_badges() for r in task_rows}
    extras = _apply(rows, wf, task_rows, badges)
    if extras.first_queued:
        _queued_behind(conn, extras.first_queued, badges)
        check()
    for card in task_rows:
        card["wip_admitted"] = bool(card["wip_admitted"])
        card["is_ephemeral"] = bool(card["is_ephemeral"])
        workspace = card["workspace"]
        if card["id"] in extras.first_queued and workspace is not None:
            # the host whose workers alone may take its runs (`core.runs.pinned_host`): the
            # card's "waits for a worker on alpha"; every card is of `wf`, whose remote counts
            badges[card["id"]]["waits_for_host"] = pinned_host(workspace, wf.remote)
        card["workspace"] = json.loads(workspace) if workspace else None
        card["blocked_by"] = json.loads(card["blocked_by"]) if card["blocked_by"] else []
        card["badges"] = badges[card["id"]]
    return {
        "workflow": workflow_json(wf),
        "tasks": task_rows,
        "profiles": extras.profiles,
        "counts": _counts(conn, wf, query) if query.counts else None,
        "next_cursor": next_cursor,
        "step_agents": extras.step_agents,
    }


@attrs.frozen
class _Extras:
    """What the badge rows give beside the badges."""

    first_queued: dict[str, tuple[str, str, str]]
    """Per task with a queued run, its first one's (agent, requested_at, id)."""
    profiles: dict[str, dict[str, Any]]
    step_agents: dict[str, str | None]


def _apply(
    rows: Iterable[Any],
    wf: Workflow,
    task_rows: list[dict[str, Any]],
    badges: dict[str, dict[str, Any]],
) -> _Extras:
    """The badge read's rows (kind, then in each kind's order) onto the cards' badges."""
    first_queued: dict[str, tuple[str, str, str]] = {}
    latest_session: dict[str, str] = {}
    latest_entry: dict[str, tuple[int, str]] = {}
    failed: set[str] = set()
    template: dict[str, list[tuple[str, str, str, bool]]] = {}
    runners: dict[str, str] = {}
    own: dict[str, list[tuple[str, str, str, bool]]] = {}
    approved: dict[str, set[str]] = {}
    profiles: dict[str, dict[str, Any]] = {}
    for kind, task_id, a, b, c, d, e, n, _p, _s1, _s2, _s3 in rows:
        if kind == RUN:
            badge = badges[task_id]
            if a == "claimed":
                badge["running"] = True
            elif a == "dead":
                badge["dead_run"] = True
            elif a == "queued":
                badge["queued"] = True
                if task_id not in first_queued:
                    first_queued[task_id] = (b, c, d)
        elif kind == SESSION:
            if a in WORKING_STATES:
                badges[task_id]["running"] = True
            latest_session[task_id] = a
        elif kind == OPEN_ENTRY:
            badges[task_id]["open_entry"] = True
        elif kind == ENTRY_HERE:
            if task_id not in latest_entry or n > latest_entry[task_id][0]:
                latest_entry[task_id] = (n, a)
        elif kind == FAILED_MARKER:
            failed.add(a)
        elif kind == SEAT:
            template.setdefault(b, []).append((a, c, d, bool(n)))
            if c == "runner":
                runners.setdefault(b, d)
        elif kind == OWN_SEAT:
            own.setdefault(task_id, []).append((a, c, d, bool(n)))
        elif kind == APPROVAL:
            approved.setdefault(task_id, set()).add(a)
        elif kind == PERMISSION:
            badges[task_id]["waiting_for_person"] = True
        elif kind == QUESTION:
            # an agent's pending questions (issue 41 item 6): the card says its agent asks one
            badges[task_id]["waiting_for_person"] = True
            badges[task_id]["questions"] = int(n)
        elif kind == PERSON_WAIT:
            # why a task waits for a person beyond a permission (core.store.waits): `failure`,
            # `blocked`; the page counts these tasks in its tab title
            badges[task_id]["needs_person"].append(a)
        elif kind == LATEST_RUN:
            # a failure a later run made good is history, not a badge
            badges[task_id]["last_run"] = a
            if a == "failed":
                badges[task_id]["last_error"] = e or "run failed"
        elif kind == BLOCKER_ROW:
            badges[task_id]["blockers"].append({"id": a, "title": b, "state": c})
        elif kind == SUBTASKS:
            counted = badges[task_id]["subtasks"]
            counted["total"] += int(n)
            if a in TERMINAL_STATES:
                counted["done"] += int(n)
        elif kind == PROFILE:
            profiles[a] = {"name": b, "role": c}
    for task_id, state in latest_session.items():
        badges[task_id]["dead_session"] = state == "FAILED"
    for task_id, (_seq, entry_id) in latest_entry.items():
        badges[task_id]["failed_marker"] = entry_id in failed
    _decisions(task_rows, template, own, approved, badges)
    # Per step, the agent `task start` would put on a task arriving there with no seats of
    # its own: the step's first runner seat, else the step's agent, else the workflow's (as
    # `RunService.primary_agent` resolves it). The page asks whether to start it after a drop.
    step_agents = {
        s.id: runners.get(s.id) or s.agent_profile_id or wf.agent_profile_id or None
        for s in wf.steps
    }
    return _Extras(first_queued, profiles, step_agents)


def _decisions(
    task_rows: list[dict[str, Any]],
    template: dict[str, list[tuple[str, str, str, bool]]],
    own: dict[str, list[tuple[str, str, str, bool]]],
    approved: dict[str, set[str]],
    badges: dict[str, dict[str, Any]],
) -> None:
    """Approved / required at each task's current step over its merged seats (the template's
    seats, each replaced by the task's own seat with the same role and agent)."""
    for card in task_rows:
        task_id, step_id = card["id"], card["workflow_step_id"]
        if not step_id or (step_id not in template and task_id not in own):
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
