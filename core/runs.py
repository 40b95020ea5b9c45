"""The runs queue: enqueue with an idempotency window and coalescing.

- Idempotency: a run with the same key requested within the last 24 hours means the request
  already landed; nothing is inserted and the enqueue counts as a success (`suppressed`).
- Coalescing: otherwise, the most recent `queued` run for the same (agent, reason) requested
  within the last 5 seconds absorbs the request (its count goes up, its payload is replaced),
  unless either side is `coalesce_exempt` - which every run an on_enter action enqueues is,
  because coalescing knows nothing of entries and would swallow a re-entry's fresh run.
  `task_assigned` runs coalesce only with runs for the same task (the reference's rule).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs
import sqlalchemy as sa

from core import ids
from core.model import Run
from core.store import events, prepared, rows, waits
from core.store import tables as t
from core.store.database import UnitOfWork
from core.store.prepared import insert_of

R = t.runs
RUN_STATUSES: Final = ("queued", "claimed", "finished", "failed", "dead", "cancelled")
"""A run's life: queued, claimed by a worker, then finished or failed (or dead, its worker
died at every attempt; or cancelled, stopped by a person or because its task left its step)."""
RETRYABLE: Final = ("failed", "dead", "cancelled")
"""The states `runs retry` queues a run again from."""
IDEMPOTENCY_WINDOW_S: Final = 24 * 3600
COALESCE_WINDOW_S: Final = 5


@attrs.frozen
class RunRequest:
    agent_profile_id: str
    task_id: str | None
    workflow_step_id: str | None
    reason: str
    payload: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    coalesce_exempt: bool = False
    entry_id: str | None = None
    """The step entry whose on_enter action asks for the run: once that entry is no longer its
    task's current entry of the step, the run is superseded ("newer entries win")."""


@attrs.frozen
class Enqueued:
    run_id: str
    outcome: Literal["inserted", "suppressed", "coalesced"]

    @property
    def suppressed(self) -> bool:
        return self.outcome == "suppressed"


def config_digest(values: Mapping[str, Any]) -> str:
    """Canonical digest of an action's effective config: sorted keys, defaults applied by the
    caller, so an omitted value and its explicit default digest alike."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_RECENT_BY_KEY = (
    sa.select(R.c.id)
    .where(R.c.idempotency_key == sa.bindparam("key"), R.c.requested_at >= sa.bindparam("since"))
    .limit(1)
)
_COALESCE_TARGET = (
    sa.select(R.c.id)
    .where(
        R.c.status == "queued",
        R.c.agent_profile_id == sa.bindparam("agent"),
        R.c.reason == sa.bindparam("reason"),
        R.c.coalesce_exempt.is_(False),
        R.c.requested_at >= sa.bindparam("since"),
        # task_assigned runs coalesce only within their own task (the reference's rule)
        sa.or_(R.c.reason != "task_assigned", R.c.task_id == sa.bindparam("task_id")),
    )
    .order_by(R.c.requested_at.desc())
    .limit(1)
)
_COALESCE = (
    sa.update(R)
    .where(R.c.id == sa.bindparam("b_id"))
    .values(coalesced_count=R.c.coalesced_count + 1, payload=sa.bindparam("b_payload"))
)
_RUN_KEYS = (
    "id",
    "agent_profile_id",
    "task_id",
    "workflow_step_id",
    "reason",
    "payload",
    "idempotency_key",
    "coalesce_exempt",
    "status",
    "coalesced_count",
    "requested_at",
    "entry_id",
)
_INSERT_RUN = insert_of(R, _RUN_KEYS)


# The keyed, coalescing-exempt enqueue (every run an on_enter action requests) as one
# conditional statement: insert unless a run with the key was requested inside the window.
# Its row count decides (1: inserted, 0: suppressed), so a fan-out needs no read before each
# insert and no savepoint to keep a seat's failure from its neighbours. Concurrent requests for
# one key are one action of one entry, serialised by that action's marker claim.
_INSERT_UNLESS_KEYED = sa.insert(R).from_select(
    list(_RUN_KEYS),
    sa.select(*(sa.bindparam(k, type_=R.c[k].type) for k in _RUN_KEYS)).where(
        ~sa.exists().where(
            R.c.idempotency_key == sa.bindparam("idempotency_key", type_=R.c.idempotency_key.type),
            R.c.requested_at >= sa.bindparam("since", type_=R.c.requested_at.type),
        )
    ),
)


_MICROS = 1_000_000


def enqueue(uow: UnitOfWork, request: RunRequest) -> Enqueued:
    """Enqueue inside the caller's unit of work."""
    # `ids.now`'s clock (strictly increasing: a fan-out's runs sort in the order requested),
    # and the windows' far ends from the same integer moment, with no datetime arithmetic
    micros = ids.now_micros()
    stamp = ids.at_micros(micros)
    if request.idempotency_key and request.coalesce_exempt:
        return _enqueue_keyed(uow, request, micros, stamp)
    if request.idempotency_key:
        since = ids.at_micros(micros - IDEMPOTENCY_WINDOW_S * _MICROS)
        found = uow.run(_RECENT_BY_KEY, {"key": request.idempotency_key, "since": since}).scalar()
        if found is not None:
            return Enqueued(found, "suppressed")
    payload = rows.dumps(dict(request.payload)) if request.payload is not None else None
    if not request.coalesce_exempt:
        since = ids.at_micros(micros - COALESCE_WINDOW_S * _MICROS)
        target = uow.run(
            _COALESCE_TARGET,
            {
                "agent": request.agent_profile_id,
                "reason": request.reason,
                "since": since,
                "task_id": request.task_id,
            },
        ).scalar()
        if target is not None:
            uow.run(_COALESCE, {"b_id": target, "b_payload": payload})
            return Enqueued(target, "coalesced")
    run_id = ids.new_id()
    uow.run(_INSERT_RUN, _row(run_id, request, payload, stamp))
    return _queued(uow, run_id, request)


def _enqueue_keyed(uow: UnitOfWork, request: RunRequest, micros: int, stamp: str) -> Enqueued:
    payload = rows.dumps(dict(request.payload)) if request.payload is not None else None
    since = ids.at_micros(micros - IDEMPOTENCY_WINDOW_S * _MICROS)
    run_id = ids.new_id()
    values = _row(run_id, request, payload, stamp)
    values["since"] = since
    if uow.run(_INSERT_UNLESS_KEYED, values).rowcount == 1:
        return _queued(uow, run_id, request)
    # Suppressed (a replay): the rare path reads which run already holds the key.
    found = uow.run(_RECENT_BY_KEY, {"key": request.idempotency_key, "since": since}).scalar()
    return Enqueued(str(found), "suppressed")


def _row(run_id: str, request: RunRequest, payload: str | None, stamp: str) -> dict[str, Any]:
    return {
        "id": run_id,
        "agent_profile_id": request.agent_profile_id,
        "task_id": request.task_id,
        "workflow_step_id": request.workflow_step_id,
        "reason": request.reason,
        "payload": payload,
        "idempotency_key": request.idempotency_key,
        "coalesce_exempt": request.coalesce_exempt,
        "status": "queued",
        "coalesced_count": 1,
        "requested_at": stamp,
        "entry_id": request.entry_id,
    }


def _queued(uow: UnitOfWork, run_id: str, request: RunRequest) -> Enqueued:
    events.record(
        uow,
        "run.queued",
        request.task_id,
        run_id=run_id,
        agent_profile_id=request.agent_profile_id,
        reason=request.reason,
    )
    return Enqueued(run_id, "inserted")


# -- claiming, for any number of workers ------------------------------------------------------

P = t.agent_profiles
AP: Final = t.agent_profiles
CLAIMED: Final = "claimed"


T = t.tasks


def _worktree_field(sqlite: bool, name: str) -> sa.ColumnElement[Any]:
    """A field of a task's worktree record (its JSON), in each dialect's words."""
    if sqlite:
        return sa.func.json_extract(T.c.workspace, sa.literal_column(f"'$.{name}'"))
    return sa.literal_column(f"(tasks.workspace::json ->> '{name}')")


def _host_of_worktree(sqlite: bool) -> sa.ColumnElement[Any]:
    """The host a task's worktree record names (its JSON's `host`)."""
    return _worktree_field(sqlite, "host")


WF: Final = t.workflows


def _travels(sqlite: bool) -> sa.ColumnElement[bool]:
    """The task's worktree travels: its workflow has a remote its branch was pushed to, and
    the last push did not fail (a failed push `held` the task on its host, work not lost)."""
    has_remote = sa.exists().where(
        WF.c.id == T.c.workflow_id, WF.c.remote.is_not(None), WF.c.remote != ""
    )
    return sa.and_(
        has_remote,
        _worktree_field(sqlite, "push").is_not(None),
        _worktree_field(sqlite, "held").is_(None),
    )


def pinned_host(workspace: str | None, remote: str | None) -> str | None:
    """The host whose workers alone may claim a queued run of a task with this worktree record
    (its stored JSON) in a workflow with this remote: the claim's statement's rule, in Python
    (`runs list`'s and the board's "waits for a worker on H"). None: any host's worker."""
    if workspace is None:
        return None
    record = json.loads(workspace)
    if remote and record.get("push") and not record.get("held"):
        return None  # its branch travels: any host re-creates the worktree
    host = record.get("host")
    return str(host) if host else None


def _next_eligible(
    sqlite: bool, profiles: tuple[str, ...] | None = None
) -> sa.Select[tuple[str, str]]:
    """The oldest queued run whose agent is below its limit of claimed runs and whose session
    (its task's agent: core.agents.session) runs no other run, that this process's host
    (`:host`) may run: its task has no worktree, or one on this host (a worktree
    lives on the machine that made it: docs/operations.md "Many machines"), or one whose
    branch travels through its workflow's remote (any host re-creates it: core.services.travel).
    With `profiles`, only runs of those agent profiles (`worker --profiles`). The index on (status,
    requested_at) is read in order and the scan stops at the first eligible run, so its cost
    does not grow with the queue behind it."""
    elsewhere = sa.exists().where(
        T.c.id == R.c.task_id,
        T.c.workspace.is_not(None),
        _host_of_worktree(sqlite) != sa.bindparam("host", type_=sa.String),
        ~_travels(sqlite),
    )
    busy = R.alias("busy")
    session_busy = sa.exists().where(
        busy.c.status == CLAIMED,
        busy.c.task_id == R.c.task_id,
        busy.c.agent_profile_id == R.c.agent_profile_id,
    )
    query = (
        sa.select(R.c.id, R.c.agent_profile_id)
        .join(AP, AP.c.id == R.c.agent_profile_id)
        .where(R.c.status == "queued", AP.c.claimed_runs < AP.c.max_concurrent_sessions)
        .where(sa.or_(R.c.task_id.is_(None), sa.and_(~elsewhere, ~session_busy)))
    )
    if profiles is not None:
        query = query.where(prepared.fixed_in(R.c.agent_profile_id, profiles))
    return query.order_by(R.c.requested_at, R.c.id).limit(1)


def _claim_values() -> dict[str, Any]:
    return {
        "status": CLAIMED,
        "claimed_at": sa.bindparam("stamp"),
        "claimed_epoch": sa.bindparam("epoch"),
        "attempts": R.c.attempts + 1,
    }


@functools.cache
def _pg_claim(profiles: tuple[str, ...] | None) -> sa.Update:
    """PostgreSQL: one statement. SKIP LOCKED passes over runs another claimer holds; the
    agent's row is locked too (waiting, not skipping: a busy agent is not an empty queue), and
    bumping its count in the same statement makes a concurrent claim of the same agent re-check
    the limit against the bumped count (PostgreSQL re-evaluates a locked row's conditions on its
    newest version). Two locking clauses, one per table: SQLAlchemy renders the first. One
    statement object per profile set: prepared SQL is cached by the statement's identity."""
    candidate = (
        _next_eligible(False, profiles)
        .with_for_update(of=R, skip_locked=True, key_share=True)
        .suffix_with("FOR NO KEY UPDATE OF agent_profiles")
        .cte("candidate")
    )
    bump = (
        sa.update(AP)
        .where(AP.c.id == candidate.c.agent_profile_id)
        .values(claimed_runs=AP.c.claimed_runs + 1)
        .cte("bump")
    )
    return (
        sa.update(R)
        .where(R.c.id == candidate.c.id)
        .values(**_claim_values())
        .returning(*R.c)
        .add_cte(bump)
    )


@functools.cache
def _sqlite_claim(profiles: tuple[str, ...] | None) -> sa.Update:
    """SQLite: writers are serialised (BEGIN IMMEDIATE), so the same rule is a conditional
    UPDATE ... RETURNING followed by the count in the same transaction."""
    return (
        sa.update(R)
        .where(R.c.id == _next_eligible(True, profiles).with_only_columns(R.c.id).scalar_subquery())
        .where(R.c.status == "queued")
        .values(**_claim_values())
        .returning(*R.c)
    )


_BUMP = (
    sa.update(P)
    .where(P.c.id == sa.bindparam("agent"))
    .values(claimed_runs=P.c.claimed_runs + sa.bindparam("delta", type_=sa.Integer))
)
# claimed(epoch) -> finished / failed / cancelled: only the claim's own epoch ends it
_RELEASE = (
    sa.update(R)
    .where(R.c.id == sa.bindparam("run_id"), R.c.status == CLAIMED)
    .where(R.c.claimed_epoch == sa.bindparam("epoch"))
    .values(
        status=sa.bindparam("status"),
        finished_at=sa.bindparam("stamp"),
        session_id=sa.bindparam("session_id"),
        error_message=sa.bindparam("error"),
    )
    # whether the run left a question pending: the release ends it only then (a statement
    # per release otherwise, for what exec agents never ask)
    .returning(
        sa.exists()
        .where(t.permissions.c.run_id == R.c.id, t.permissions.c.state == "pending")
        .label("asked"),
        sa.exists()
        .where(t.questions.c.run_id == R.c.id, t.questions.c.state == "pending")
        .label("questioned"),
    )
)


def claim_next(
    uow: UnitOfWork, epoch: str, host: str, profiles: Sequence[str] | None = None
) -> Run | None:
    """Claim the oldest queued run whose agent has room, whose session runs nothing, and that
    a worker on `host` may run (serving only `profiles`, agent profile ids, when given), for
    `epoch`; None when none can be taken now. One conditional statement decides (plus the
    agent's count on SQLite): a run this host may not run is never claimed, so it is never
    given back or failed.

    On PostgreSQL two claims of one session's runs can each see the other's uncommitted
    claim as absent; the index of claimed sessions (`tables.CLAIMED_SESSION_INDEX`) then
    fails the second statement, waiting for the first to commit: `lost_session_race` tells
    that failure apart, and the caller claims again in a new transaction (which sees the
    first claim and passes over its session)."""
    values = {"stamp": ids.now(), "epoch": epoch, "host": host}
    chosen = tuple(sorted(set(profiles))) if profiles is not None else None
    claim = _sqlite_claim(chosen) if uow.store.is_sqlite else _pg_claim(chosen)
    # prepared driver SQL (core.store.prepared): the claim, and the release below, run once
    # per run on every worker
    row = uow.run(claim, values).mapping()
    if row is None:
        return None
    if uow.store.is_sqlite:
        uow.run(_BUMP, {"agent": row["agent_profile_id"], "delta": 1})
    return _started(uow, rows.run(row))


def lost_session_race(exc: sa.exc.IntegrityError) -> bool:
    """Whether a claim failed on the index of claimed sessions (`claim_next`): another claim of
    the same session committed first."""
    diag = getattr(exc.orig, "diag", None)
    return getattr(diag, "constraint_name", None) == t.CLAIMED_SESSION_INDEX


def _started(uow: UnitOfWork, run: Run) -> Run:
    events.record(
        uow, "run.started", run.task_id, run_id=run.id, agent_profile_id=run.agent_profile_id
    )
    return run


def release(
    uow: UnitOfWork,
    run: Run,
    epoch: str,
    *,
    ok: bool,
    session_id: str | None = None,
    error: str | None = None,
    cancelled: bool = False,
    entry_current: bool = False,
) -> bool:
    """End a claimed run as finished, failed or (`cancelled`) cancelled. False when the claim
    is no longer this epoch's (it was declared dead and its run re-queued): nothing is written
    then. With `entry_current`, also False (nothing written) when the run's entry is
    superseded: the fence's condition and the write in one statement (`fence` says which)."""
    status = "cancelled" if cancelled else "finished" if ok else "failed"
    done = uow.run(
        _RELEASE_CURRENT if entry_current else _RELEASE,
        {
            "run_id": run.id,
            "epoch": epoch,
            "status": status,
            "stamp": ids.now(),
            "session_id": session_id,
            "error": error,
        },
    ).first()
    if done is None:
        return False
    if done[0]:
        cancel_permissions(uow, [run.id], by="run_ended")
    if done[1]:
        cancel_questions(uow, [run.id], by="run_ended")
    events.record(
        uow,
        {"cancelled": "run.cancelled", "finished": "run.finished"}.get(status, "run.failed"),
        run.task_id,
        run_id=run.id,
        agent_profile_id=run.agent_profile_id,
    )
    # Last, and deferred: every worker's claim of this agent locks its row, so on PostgreSQL
    # the count goes down in the round trip of the COMMIT that lets the row go, instead of
    # holding it across the rest of the transaction's round trips
    prepared.defer(uow.conn, _BUMP, {"agent": run.agent_profile_id, "delta": -1})
    return True


# claimed(epoch) -> queued: a stopping worker hands back a turn it did not let finish. The
# claim does not count as an attempt (the attempts bound worker deaths, not shutdowns).
_GIVE_BACK = (
    sa.update(R)
    .where(R.c.id == sa.bindparam("run_id"), R.c.status == CLAIMED)
    .where(R.c.claimed_epoch == sa.bindparam("epoch"))
    .values(
        status="queued",
        claimed_at=None,
        claimed_epoch=None,
        attempts=sa.case((R.c.attempts > 0, R.c.attempts - 1), else_=0),
    )
)


def give_back(uow: UnitOfWork, run: Run, epoch: str) -> bool:
    """Put a claimed run back in the queue (its worker is stopping). False when the claim is
    no longer this epoch's."""
    if uow.conn.execute(_GIVE_BACK, {"run_id": run.id, "epoch": epoch}).rowcount != 1:
        return False
    uow.conn.execute(_BUMP, {"agent": run.agent_profile_id, "delta": -1})
    events.record(
        uow,
        "run.queued",
        run.task_id,
        run_id=run.id,
        agent_profile_id=run.agent_profile_id,
        reason="worker_stopped",
    )
    return True


# -- fencing: a run's outcome is written only under its claim, and only while its entry holds ---

_E = t.step_entries
_NEWER_ENTRY = t.step_entries.alias("newer_entry")
_ENTRY_CURRENT = sa.exists().where(
    _E.c.id == R.c.entry_id,
    ~sa.exists().where(
        _NEWER_ENTRY.c.task_id == _E.c.task_id,
        _NEWER_ENTRY.c.step_id == _E.c.step_id,
        _NEWER_ENTRY.c.entry_seq > _E.c.entry_seq,
    ),
)
"""The run's entry is not superseded: no newer entry exists for its (task, step) pair, i.e. the
task has not left the step and come back since (the ledger's "newer entries win"). A task that
only moved on (its run's own verdict may have moved it) supersedes nothing."""
# A write of the run's outcome as one conditional statement: the run is claimed under `epoch`
# and its entry (when it has one) is still current. It writes nothing the run did not have, but
# on PostgreSQL it locks the run's row until the caller's transaction ends, so no re-queue by
# another process can fall between this decision and the write it guards (SQLite's writers are
# serialised already). Its row count decides.
_FENCE = (
    sa.update(R)
    .where(R.c.id == sa.bindparam("b_run_id"), R.c.status == CLAIMED)
    .where(R.c.claimed_epoch == sa.bindparam("b_epoch"))
    .where(sa.or_(R.c.entry_id.is_(None), _ENTRY_CURRENT))
    .values(claimed_epoch=R.c.claimed_epoch)
)
# `release` with the fence's condition: one statement where the fence and the write were two
_RELEASE_CURRENT = _RELEASE.where(sa.or_(R.c.entry_id.is_(None), _ENTRY_CURRENT))
_WHY_FENCED = sa.select(
    R.c.status,
    R.c.claimed_epoch,
    R.c.attempts,
    R.c.entry_id,
    sa.or_(R.c.entry_id.is_(None), _ENTRY_CURRENT).label("current"),
).where(R.c.id == sa.bindparam("b_run_id"))


def fence(uow: UnitOfWork, run_id: str, epoch: str | None) -> str | None:
    """Hold run `run_id` for a write its outcome makes, in `uow`'s transaction: None when the
    write may go ahead (the run is claimed under `epoch` and its entry is current), else why
    not: `claim_lost` (the claim is no longer `epoch`'s: it was re-queued, re-claimed, ended)
    or `superseded` (a newer entry of the run's entry's step exists: the task left and came
    back). A run id naming no run, or a run never claimed, fences nothing but supersession (a
    turn outside the queue); a run claimed once and re-queued since is `claim_lost`."""
    if epoch is not None and uow.run(_FENCE, {"b_run_id": run_id, "b_epoch": epoch}).rowcount:
        return None
    row = uow.conn.execute(_WHY_FENCED, {"b_run_id": run_id}).first()
    if row is None:
        return None
    if row.status == "queued" and not row.attempts:
        # never claimed: a turn given the run by hand, outside the queue (no claim to lose)
        return None if row.current else "superseded"
    if row.status != CLAIMED or row.claimed_epoch != epoch:
        return "claim_lost"
    return None if row.current else "superseded"


def superseded(conn: sa.Connection, run: Run) -> bool:
    """Whether `run` was queued by an entry a newer entry of the same step superseded (the
    task left the step and came back)."""
    if run.entry_id is None:
        return False
    row = conn.execute(_WHY_FENCED, {"b_run_id": run.id}).first()
    return row is not None and not row.current


_S = t.task_sessions
_CLAIMED_FOR_SESSION = (
    sa.select(R.c.claimed_epoch)
    .join(_S, sa.and_(_S.c.task_id == R.c.task_id, _S.c.agent_profile_id == R.c.agent_profile_id))
    .where(_S.c.id == sa.bindparam("b_session_id"), R.c.status == CLAIMED)
    .distinct()
)


def claimed_for_session(conn: sa.Connection, session_id: str) -> list[str | None]:
    """The epochs holding claimed runs of the session's task and agent: a turn of the
    session is in flight wherever one of them is alive (a worker runs a run on the task's
    session for its agent, core.agents.worker)."""
    return [e for e in conn.execute(_CLAIMED_FOR_SESSION, {"b_session_id": session_id}).scalars()]


# -- cancelling and retrying ------------------------------------------------------------------

_CANCEL_QUEUED = (
    sa.update(R)
    .where(R.c.id == sa.bindparam("run_id"), R.c.status == "queued")
    .values(
        status="cancelled",
        cancel_reason=sa.bindparam("b_reason"),
        finished_at=sa.bindparam("stamp"),
    )
)
_REQUEST_CANCEL = (
    sa.update(R)
    .where(R.c.id == sa.bindparam("run_id"), R.c.status == CLAIMED, R.c.cancel_reason.is_(None))
    .values(cancel_reason=sa.bindparam("b_reason"))
)


@attrs.frozen
class Cancel:
    """What `cancel` did: `ended` (a queued run is cancelled now), `requested` (its worker will
    stop the turn), or `none` (the run is in no state to cancel; `status` says which)."""

    outcome: Literal["ended", "requested", "none"]
    status: str


def cancel(uow: UnitOfWork, run_id: str, reason: str) -> Cancel:
    """Cancel a run: a queued one at once, a claimed one by a request on its row that the
    worker running it acts on. Each is one conditional statement; its row count decides."""
    stamp = ids.now()
    if uow.conn.execute(
        _CANCEL_QUEUED, {"run_id": run_id, "b_reason": reason, "stamp": stamp}
    ).rowcount:
        row = uow.conn.execute(sa.select(R.c.task_id).where(R.c.id == run_id)).one()
        events.record(uow, "run.cancelled", row.task_id, run_id=run_id, reason=reason)
        return Cancel("ended", "cancelled")
    if uow.conn.execute(_REQUEST_CANCEL, {"run_id": run_id, "b_reason": reason}).rowcount:
        return Cancel("requested", CLAIMED)
    status = uow.conn.execute(sa.select(R.c.status).where(R.c.id == run_id)).scalar()
    return Cancel("none", str(status))


def note_cancel(uow: UnitOfWork, run_id: str, reason: str, *, keep_earlier: bool = False) -> None:
    """Record why the claimed run `run_id` ends cancelled (its worker ends it next); with
    `keep_earlier`, a reason asked for before (a person's cancel) stands. One statement, on a
    claimed run only: a run ended meanwhile keeps its row as it is."""
    R = t.runs
    given = sa.literal(reason, sa.String)
    value = sa.func.coalesce(R.c.cancel_reason, given) if keep_earlier else given
    uow.conn.execute(
        sa.update(R).where(R.c.id == run_id, R.c.status == CLAIMED).values(cancel_reason=value)
    )


def cancels_requested(conn: sa.Connection, run_ids: Sequence[str]) -> dict[str, str]:
    """The pending cancel requests among these claimed runs: run id -> reason."""
    found = conn.execute(
        sa.select(R.c.id, R.c.cancel_reason).where(
            R.c.id.in_(list(run_ids)), R.c.status == CLAIMED, R.c.cancel_reason.is_not(None)
        )
    )
    return {str(run_id): str(reason) for run_id, reason in found}


def cancel_requested(conn: sa.Connection, run_id: str) -> str | None:
    """The reason of a pending cancel request on a claimed run, else None."""
    found = conn.execute(
        sa.select(R.c.cancel_reason).where(R.c.id == run_id, R.c.status == CLAIMED)
    ).scalar()
    return str(found) if found is not None else None


def retry(uow: UnitOfWork, run: Run) -> str | None:
    """Queue `run` again as a new attempt: a new row naming the old one (`retry_of`), so the
    old attempt keeps its status, error and transcript. None when it may not be: one
    conditional UPDATE of the old run (still retryable, never retried, and its task still at
    the run's step) decides, so of two racing retries exactly one queues an attempt."""
    run_id = ids.new_id()
    where = [R.c.id == run.id, R.c.retried_by.is_(None), R.c.status.in_(RETRYABLE)]
    if run.task_id is not None and run.workflow_step_id is not None:
        tasks = t.tasks
        where.append(
            sa.exists().where(
                tasks.c.id == run.task_id,
                tasks.c.workflow_step_id == run.workflow_step_id,
                tasks.c.archived_at.is_(None),
            )
        )
    if uow.conn.execute(sa.update(R).where(*where).values(retried_by=run_id)).rowcount != 1:
        return None
    request = RunRequest(
        agent_profile_id=run.agent_profile_id,
        task_id=run.task_id,
        workflow_step_id=run.workflow_step_id,
        reason=run.reason,
        payload=run.payload,
        coalesce_exempt=True,
        entry_id=run.entry_id,
    )
    payload = rows.dumps(dict(run.payload)) if run.payload is not None else None
    values = _row(run_id, request, payload, ids.now())
    uow.run(_INSERT_RUN, values)
    uow.conn.execute(sa.update(R).where(R.c.id == run_id).values(retry_of=run.id))
    _queued(uow, run_id, request)
    return run_id


@attrs.frozen
class Requeued:
    requeued: tuple[Run, ...] = ()
    dead: tuple[Run, ...] = ()


_CLAIMED_EPOCHS = sa.select(R.c.claimed_epoch).where(R.c.status == CLAIMED).distinct()


def requeue_dead(uow: UnitOfWork) -> Requeued:
    """Runs claimed by dead epochs go back to the queue; a run that has now died with its
    worker `max_attempts` times is marked `dead` instead, never to be retried. Exact: an
    epoch is dead only when its liveness lock is free (`core.store.liveness`)."""
    epochs = {e for e in uow.conn.execute(_CLAIMED_EPOCHS).scalars()}
    dead = [e for e in epochs if uow.store.liveness.is_dead(e, uow.conn)]
    if not dead:
        return Requeued()
    stamp = ids.now()
    # A dead epoch never comes back, so naming it is a safe compare-and-set.
    of_dead = sa.and_(
        R.c.status == CLAIMED,
        sa.or_(
            R.c.claimed_epoch.in_([e for e in dead if e is not None]), R.c.claimed_epoch.is_(None)
        ),
    )
    # a run someone asked to stop is not started again because its worker died first
    stopped = [
        rows.run(r)
        for r in uow.conn.execute(
            sa.update(R)
            .where(of_dead, R.c.cancel_reason.is_not(None))
            .values(status="cancelled", finished_at=stamp)
            .returning(*R.c)
        ).mappings()
    ]
    poisoned = [
        rows.run(r)
        for r in uow.conn.execute(
            sa.update(R)
            .where(of_dead, R.c.attempts >= R.c.max_attempts)
            .values(
                status="dead",
                finished_at=stamp,
                error_message="its worker died during each of its attempts; not retried again",
            )
            .returning(*R.c)
        ).mappings()
    ]
    back = [
        rows.run(r)
        for r in uow.conn.execute(
            sa.update(R)
            .where(of_dead)
            .values(status="queued", claimed_at=None, claimed_epoch=None)
            .returning(*R.c)
        ).mappings()
    ]
    for run in (r for r in poisoned if r.task_id):
        # given up on: a person decides what now (unless another run of the task is queued)
        waits.begin(
            uow,
            str(run.task_id),
            "failure",
            ~sa.select(R.c.id)
            .where(R.c.task_id == run.task_id, R.c.status.in_(("queued", CLAIMED)))
            .exists(),
            run_id=run.id,
            session_id=None,
            error=run.error_message or "",
        )
    # The dead worker's questions can never be answered to it: a re-run asks again.
    cancel_permissions(uow, [r.id for r in (*stopped, *poisoned, *back)], by="worker_died")
    cancel_questions(uow, [r.id for r in (*stopped, *poisoned, *back)], by="worker_died")
    for run in (*stopped, *poisoned, *back):
        uow.conn.execute(_BUMP, {"agent": run.agent_profile_id, "delta": -1})
        events.record(
            uow,
            {"queued": "run.queued", "cancelled": "run.cancelled"}.get(run.status, "run.failed"),
            run.task_id,
            run_id=run.id,
            agent_profile_id=run.agent_profile_id,
            status=run.status,
        )
    return Requeued(tuple(back), tuple(poisoned))


@attrs.frozen
class _Wait:
    """A turn's wait on a person: permission requests and questions end alike."""

    table: sa.Table
    noun: str
    event: str
    by: str
    at: str


_PERMISSIONS = _Wait(t.permissions, "permission", "permission.resolved", "decided_by", "decided_at")
_QUESTIONS = _Wait(t.questions, "question", "question.answered", "answered_by", "answered_at")


def _cancel_waits(
    uow: UnitOfWork, wait: _Wait, run_ids: Sequence[str], named: Sequence[str], by: str
) -> list[str]:
    """End the still pending rows of `run_ids` (or those named) `cancelled`, `by` saying why,
    each with its resolution event and `task.needs_person_ended`, in `uow`'s transaction.
    Conditional on `pending`: one a person answered meanwhile keeps the answer."""
    table = wait.table
    which = []
    if run_ids:
        which.append(table.c.run_id.in_(list(run_ids)))
    if named:
        which.append(table.c.id.in_(list(named)))
    if not which:
        return []
    ended = uow.conn.execute(
        sa.update(table)
        .where(table.c.state == "pending", sa.or_(*which))
        .values({"state": "cancelled", wait.by: by, wait.at: ids.now()})
        .returning(table.c.id, table.c.task_id, table.c.run_id)
    ).all()
    key = f"{wait.noun}_id"
    for row_id, task_id, run_id in ended:
        named_row = {key: row_id, "run_id": run_id}
        events.record(uow, wait.event, task_id, **named_row, state="cancelled")
        events.record(uow, "task.needs_person_ended", task_id, reason=wait.noun, **named_row)
    return [str(row[0]) for row in ended]


def cancel_permissions(
    uow: UnitOfWork,
    run_ids: Sequence[str] = (),
    *,
    permission_ids: Sequence[str] = (),
    by: str,
) -> list[str]:
    """End the still pending permission requests of `run_ids` (or those named) `cancelled`,
    `decided_by` saying why, each with its `permission.resolved` event."""
    return _cancel_waits(uow, _PERMISSIONS, run_ids, permission_ids, by)


def cancel_questions(
    uow: UnitOfWork,
    run_ids: Sequence[str] = (),
    *,
    question_ids: Sequence[str] = (),
    by: str,
) -> list[str]:
    """End the still pending questions of `run_ids` (or those named) `cancelled`,
    `answered_by` saying why, each with its `question.answered` event."""
    return _cancel_waits(uow, _QUESTIONS, run_ids, question_ids, by)
