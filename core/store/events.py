"""The board's event log: an outbox written in the transaction of the change it describes.

A write site calls `record(uow, type, task_id, **fields)` (one line); the event waits on the
unit of work and is inserted by `flush`, which `Store.transaction` calls just before COMMIT.
So an event exists exactly when its change committed, whichever process made it, and a crash
loses neither or both.

Ids only grow in commit order, so a reader that has seen id N never later finds an id below N:

- SQLite has one writer at a time (BEGIN IMMEDIATE holds the database lock from the first
  statement to COMMIT), so ids are handed out and committed in the same order; AUTOINCREMENT
  keeps an id from being handed out twice after pruning.
- PostgreSQL commits concurrent transactions in any order, so `flush` first takes a
  transaction-level advisory lock, held until COMMIT: the id is drawn and committed before the
  next event-writing transaction draws its own. Inserting at the very end of the transaction
  keeps the lock's hold short and means its holder waits on nothing else (no deadlock). The
  same transaction NOTIFYs the channel readers LISTEN on; PostgreSQL delivers it at COMMIT.

Events are kept for at least `RETENTION`; `prune` deletes older ones in small batches, each its
own short transaction, so writers never wait long behind it.

Observers in this process (plugins' `laneway_event` hook, see `core.observe`) get each
transaction's events after its COMMIT, in commit order; a rollback delivers nothing. The store
asks its `Observer` whether anyone listens before doing any of that work: with no listener,
`flush` is the plain insert it always was.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core import actors, ids
from core.store import prepared
from core.store import tables as t

if TYPE_CHECKING:
    from core.store.database import Store, UnitOfWork
    from core.store.wake import Waiter

EV = t.board_events
CHANNEL: Final = "laneway_board_events"
# "laneway events" as a 63-bit integer: distinct from the ownership lock's key.
PG_ORDER_LOCK: Final = 0x6C6E7765766E74
RETENTION: Final = timedelta(hours=24)
PRUNE_BATCH: Final = 500
_ENTRY_TASK_CACHE_MAX: Final = 4096
_INSERT = prepared.insert_of(EV, ("type", "task_id", "at", "data", "actor"))
_PG_LOCK = f"SELECT pg_advisory_xact_lock({PG_ORDER_LOCK})"
_PG_ORDER = f"SELECT pg_advisory_xact_lock({PG_ORDER_LOCK}), pg_notify('{CHANNEL}', '')"
# PostgreSQL, no observer: the order lock (and the NOTIFY) taken by the insert itself, one
# round trip fewer per transaction. The uncorrelated subquery is a one-time filter, evaluated
# before the statement produces its row, so before the id's nextval: the lock is held when
# the id is drawn, as `_PG_ORDER` then the insert guaranteed. Taking it again for a second
# row of the same transaction is a no-op in effect (the transaction already holds it), and
# PostgreSQL folds identical notifications of one transaction into one.
_PG_ORDERED_INSERT = sa.text(
    "INSERT INTO board_events (type, task_id, at, data, actor) "
    "SELECT CAST(:type AS VARCHAR), CAST(:task_id AS VARCHAR), CAST(:at AS VARCHAR), "
    "CAST(:data AS TEXT), CAST(:actor AS VARCHAR) WHERE (SELECT count(*) FROM "
    f"(SELECT pg_advisory_xact_lock({PG_ORDER_LOCK}), pg_notify('{CHANNEL}', '')) AS ordered"
    ") = 1"
)

TYPES: Final = (
    "task.created",
    "task.archived",
    "task.deleted",
    "task.moved",
    "entry.marker",
    "run.queued",
    "run.started",
    "run.finished",
    "run.failed",
    "run.cancelled",
    "decision.recorded",
    "session.state",
    "agent.item",
    "agent_error.dispatched",
    "permission.requested",
    "permission.resolved",
    "question.asked",
    "question.answered",
    "hook.failed",
    "task.needs_person",
    "task.needs_person_ended",
)
OBSERVED_ONLY: Final = ("agent.output",)
"""Types handed to observers but never stored: nothing is written when they happen (an agent's
output line). Such an event has id 0 and does not reach the HTTP stream."""

_T = TypeVar("_T")


@attrs.frozen
class Event:
    """One stored event: its id, type, task (None: board-wide), time and payload."""

    id: int
    type: str
    task_id: str | None
    at: str
    data: Mapping[str, Any]
    actor: str = actors.SYSTEM
    """Who made the change (`core.actors`; its own column, `system` for an event stored
    before actors were recorded)."""

    def as_json(self) -> dict[str, Any]:
        """The stream's `data:` object: at least `id`, `type`, `task_id`, `at` and `actor`."""
        return {
            **self.data,
            "actor": self.actor,
            "id": self.id,
            "type": self.type,
            "task_id": self.task_id,
            "at": self.at,
        }


class Observer(Protocol):
    """Who gets committed events (installed on `Store.observer` by the host)."""

    def wanted(self) -> bool:
        """Whether anyone listens now; False spares every other call."""
        ...

    def committed(self, events: Sequence[Event]) -> None:
        """One transaction's events, just committed (called under the writer lock, so in
        commit order: queue them, do not act)."""
        ...

    def drain(self) -> None:
        """Hand queued events to the listeners (called after the writer lock is released)."""
        ...


@attrs.define
class _Pending:
    type: str
    task_id: str | None
    at: str
    fields: dict[str, Any]
    entry_id: str | None = None
    """Set when the task is not known at the write site; `flush` looks it up."""
    actor: str = attrs.field(factory=actors.current)
    """Who made the change (`core.actors`), read where the event is recorded."""


# -- writing ----------------------------------------------------------------------------------


def record(uow: UnitOfWork, type_: str, task_id: str | None, **fields: Any) -> None:
    """Record an event in `uow`'s transaction (inserted at its COMMIT)."""
    uow.events.append(_Pending(type_, task_id, ids.now(), fields))


def in_commit_order(uow: UnitOfWork, column: sa.Column[str], row_id: str, stamp: str) -> str:
    """The time of a row `uow` wrote (`stamp`, in `column` of the row with id `row_id`), put
    where commit order holds it, for a reader whose cursor compares it with another
    transaction's time (a comment's or a verdict's, against a run's claim:
    core.agents.feedback): a row stamped before a claim's time is committed before that claim
    commits, so the claimed run's first read sees it. Call it after the transaction's other
    statements; the time the row holds is returned.

    SQLite: `stamp` was taken inside `uow`, which holds the database's write lock from its
    BEGIN IMMEDIATE, as a claim does when it stamps: kept. PostgreSQL: the event order lock is
    taken (held until COMMIT, and waiting on nothing else after it, as `flush` takes it) and
    the row stamped again under it; a claim stamps, then at its COMMIT waits for that lock
    (its `run.started` event), so it commits after any row stamped earlier under it."""
    if uow.store.is_sqlite:
        return stamp
    prepared.run_driver_sql(uow.conn, _PG_LOCK)
    at = ids.now()
    table = column.table
    uow.conn.execute(sa.update(table).where(table.c.id == row_id).values({column.name: at}))
    return at


def marker(
    uow: UnitOfWork, entry_id: str, position: int, kind: str, state: str, reason: str | None
) -> None:
    """An `entry.marker` event; the ledger knows the entry, `flush` finds its task."""
    fields = _marker_fields(entry_id, position, kind, state, reason)
    uow.events.append(_Pending("entry.marker", None, ids.now(), fields, entry_id=entry_id))


def marker_known(
    uow: UnitOfWork,
    at: str,
    task_id: str,
    entry_id: str,
    position: int,
    kind: str,
    state: str,
    reason: str | None,
) -> None:
    """The same `entry.marker` event as `marker`, for a writer that already knows the entry's
    task and its time (a batch stamps all it writes once): no clock read, no task lookup."""
    fields = _marker_fields(entry_id, position, kind, state, reason)
    uow.events.append(_Pending("entry.marker", task_id, at, fields))


def _marker_fields(
    entry_id: str, position: int, kind: str, state: str, reason: str | None
) -> dict[str, Any]:
    return {
        "entry_id": entry_id,
        "position": position,
        "kind": kind,
        "state": state,
        "reason": reason,
    }


_entry_tasks: dict[str, str] = {}


def know_entry(entry_id: str, task_id: str) -> None:
    """Remember an entry's task where the entry is made, so the markers written in the
    transactions after it need no read to find their task (an entry's task never changes)."""
    if len(_entry_tasks) > _ENTRY_TASK_CACHE_MAX:
        _entry_tasks.clear()
    _entry_tasks[entry_id] = task_id


def _resolve_tasks(conn: Connection, pending: list[_Pending]) -> None:
    wanted = {p.entry_id for p in pending if p.entry_id and p.entry_id not in _entry_tasks}
    if wanted:
        found = conn.execute(
            sa.select(t.step_entries.c.id, t.step_entries.c.task_id).where(
                t.step_entries.c.id.in_(sorted(wanted))
            )
        ).all()
        if len(_entry_tasks) > _ENTRY_TASK_CACHE_MAX:
            _entry_tasks.clear()  # an entry's task never changes; the cache only saves reads
        _entry_tasks.update({str(e): str(task) for e, task in found})
    for p in pending:
        if p.entry_id is not None:
            p.task_id = _entry_tasks.get(p.entry_id)


_encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
"""`json.dumps(..., separators=(",", ":"), default=str)` without building an encoder per call."""


def _without_passing_claims(pending: list[_Pending]) -> list[_Pending]:
    """Drop the `in_progress` event of a marker settled later in the same transaction (a
    transactional kind's claim): the claim never commits as a state of its own, and an event
    exists exactly when its change committed, so readers see the marker go straight to where
    it settled. Decided at COMMIT, after any savepoint has taken its events back."""
    settled = {
        (p.fields["entry_id"], p.fields["position"], p.fields["kind"])
        for p in pending
        if p.type == "entry.marker" and p.fields["state"] != "in_progress"
    }
    if not settled:
        return pending
    return [
        p
        for p in pending
        if not (
            p.type == "entry.marker"
            and p.fields["state"] == "in_progress"
            and (p.fields["entry_id"], p.fields["position"], p.fields["kind"]) in settled
        )
    ]


ENDS_FAILURE_WAIT: Final = frozenset({"task.moved", "run.queued", "task.archived", "task.deleted"})
"""Events whose commit ends the task's `failure` wait (core.store.waits): someone moved it,
queued its agent again, archived or deleted it. Archiving or deleting ends every wait."""
_ENDS_EVERY_WAIT: Final = frozenset({"task.archived", "task.deleted"})


def _ended_waits(conn: Connection, pending: list[_Pending]) -> list[_Pending]:
    """The `task.needs_person_ended` events the unit's own events imply (one DELETE, and only
    in a unit holding such an event)."""
    failure = {p.task_id for p in pending if p.type in ENDS_FAILURE_WAIT and p.task_id}
    if not failure:
        return []
    every = {p.task_id for p in pending if p.type in _ENDS_EVERY_WAIT and p.task_id}
    waits = t.person_waits
    gone = conn.execute(
        sa.delete(waits)
        .where(
            waits.c.task_id.in_(sorted(failure)),
            sa.or_(waits.c.reason == "failure", waits.c.task_id.in_(sorted(every))),
        )
        .returning(waits.c.task_id, waits.c.reason, waits.c.data)
    ).all()
    at = ids.now()
    return [
        _Pending(
            "task.needs_person_ended",
            str(task),
            at,
            {"reason": str(reason), **json.loads(str(data))},
        )
        for task, reason, data in sorted(gone)
    ]


def flush(uow: UnitOfWork) -> list[Event]:
    """Insert the unit's pending events; called by `Store.transaction` before COMMIT.

    Returns the inserted events, with their ids, when an observer listens (for delivery after
    COMMIT); otherwise an empty list, and the insert returns nothing."""
    pending, uow.events = uow.events, []
    if not pending:
        return []
    pending = _without_passing_claims(pending)
    conn = uow.conn
    _resolve_tasks(conn, pending)
    pending.extend(_ended_waits(conn, pending))
    rows = [
        {
            "type": p.type,
            "task_id": p.task_id,
            "at": p.at,
            "data": _encode(p.fields),
            "actor": p.actor,
        }
        for p in pending
    ]
    observer = uow.store.observer
    if observer is None or not observer.wanted():
        # the driver's executemany on SQL compiled once: this insert ends every transaction,
        # and on PostgreSQL it goes in one round trip with the COMMIT (`prepared.defer_many`)
        prepared.defer_many(conn, _INSERT if uow.store.is_sqlite else _PG_ORDERED_INSERT, rows)
        return []
    if not uow.store.is_sqlite:
        prepared.run_driver_sql(conn, _PG_ORDER)
    inserted = conn.execute(
        sa.insert(EV).returning(EV.c.id, sort_by_parameter_order=True), rows
    ).scalars()
    return [
        Event(id=int(i), type=p.type, task_id=p.task_id, at=p.at, data=p.fields, actor=p.actor)
        for i, p in zip(inserted, pending, strict=True)
    ]


def notify(store: Store, type_: str, task_id: str | None, **fields: Any) -> None:
    """Hand an `OBSERVED_ONLY` event to this process's observers now; nothing is stored, and
    nothing at all happens when no one listens."""
    observer = store.observer
    if observer is None or not observer.wanted():
        return
    now = ids.now()
    observer.committed(
        [Event(id=0, type=type_, task_id=task_id, at=now, data=fields, actor=actors.current())]
    )
    observer.drain()


class Commits:
    """Wakes a waiter when any process commits an event, so it re-reads what it waits for at
    once. PostgreSQL: a LISTEN on `CHANNEL`, on a connection of its own. SQLite: a socket of
    this waiter's own in the board's wake directory, sent a byte after each commit of events
    (`core.store.wake`). Bound here, so make it before the first read of what you wait for.
    When neither can be had, every wait simply lasts `timeout` (a short poll)."""

    def __init__(self, store: Store) -> None:
        self._conn: Any = None
        self._waiter: Waiter | None = None
        if store.is_sqlite:
            from core.store import wake
            from core.store.dialect import sqlite_path

            db = sqlite_path(store.url)
            if db is not None:
                waiter = wake.Waiter(db)
                self._waiter = waiter if waiter.usable else None
            return
        try:
            import psycopg

            url = store.url.set(drivername="postgresql")
            self._conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
            self._conn.execute(f"LISTEN {CHANNEL}")
        except Exception as exc:  # noqa: BLE001 - a poll still finds the change, later
            from core.logs import logger

            logger.bind(error=f"{type(exc).__name__}: {exc}").warning(
                "LISTEN for board changes failed; polling instead"
            )
            self.close()

    @property
    def listening(self) -> bool:
        """Whether a commit wakes this waiter (else each wait is a poll of `timeout`)."""
        return self._conn is not None or self._waiter is not None

    @property
    def woken(self) -> int:
        """How many of this waiter's waits a wake-up ended (SQLite), for tests and benchmarks."""
        return 0 if self._waiter is None else self._waiter.woken

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` s; True when something may have committed (always, polling)."""
        if self._waiter is not None:
            return self._waiter.wait(timeout)
        if self._conn is None:
            import time

            time.sleep(timeout)
            return True
        try:
            for _note in self._conn.notifies(timeout=timeout, stop_after=1):
                return True
        except Exception:  # noqa: BLE001 - the connection broke: poll from now on
            self.close()
            return True
        return False

    def close(self) -> None:
        conn, self._conn = self._conn, None
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.close()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


def wait_until(
    store: Store,
    read: Callable[[], _T],
    settled: Callable[[_T], bool],
    *,
    stop: Callable[[], bool],
    poll_s: float,
    recheck_s: float,
) -> _T:
    """Read until `settled(read())` or `stop()`, re-reading when any process commits an event
    (`Commits`: at once; every `poll_s` when it cannot listen), checking `stop()` every
    `poll_s`, and re-reading at least every
    `recheck_s` (a missed notification costs that long at most). What was last read."""
    import time

    commits = Commits(store)
    try:
        while True:
            found = read()
            read_at = time.monotonic()
            if settled(found) or stop():
                return found
            while True:
                woken = commits.wait(poll_s)
                if woken or stop() or time.monotonic() - read_at >= recheck_s:
                    break
    finally:
        commits.close()


def mark(uow: UnitOfWork) -> int:
    """How many events are pending now (for `rollback_to` after a failed savepoint)."""
    return len(uow.events)


def rollback_to(uow: UnitOfWork, count: int) -> None:
    """Forget events recorded after `mark` returned `count`: their changes were rolled back."""
    del uow.events[count:]


# -- reading ----------------------------------------------------------------------------------


def _event(row: Any) -> Event:
    return Event(
        id=int(row.id),
        type=row.type,
        task_id=row.task_id,
        at=row.at,
        data=json.loads(row.data),
        actor=row.actor,
    )


_AFTER = (
    sa.select(EV.c.id, EV.c.type, EV.c.task_id, EV.c.at, EV.c.data, EV.c.actor)
    .where(EV.c.id > sa.bindparam("last_id"))
    .order_by(EV.c.id)
    .limit(sa.bindparam("limit"))
)


def after(
    conn: Connection, last_id: int, *, task_id: str | None = None, limit: int = 500
) -> list[Event]:
    """Events with an id above `last_id`, oldest first, at most `limit`."""
    if task_id is None:
        # serve's pump reads this after every commit of events, before any stream is sent
        # them: prepared driver SQL (a Core statement's cache key and result processing were
        # most of a 10-event page)
        found = prepared.execute(conn, _AFTER, {"last_id": last_id, "limit": limit})
        return [
            Event(
                id=int(row[0]),
                type=row[1],
                task_id=row[2],
                at=row[3],
                data=json.loads(row[4]),
                actor=row[5],
            )
            for row in found.rows()
        ]
    query = sa.select(EV).where(EV.c.id > last_id).order_by(EV.c.id).limit(limit)
    if task_id is not None:
        query = query.where(EV.c.task_id == task_id)
    return [_event(r) for r in conn.execute(query)]


def latest_id(conn: Connection) -> int:
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(EV.c.id), 0))).scalar_one())


def read_all(store: Store, *, task_id: str | None = None) -> list[Event]:
    """Every retained event (tests and tools; the stream pages with `after`)."""
    found: list[Event] = []
    with store.read() as conn:
        while True:
            page = after(conn, found[-1].id if found else 0, task_id=task_id, limit=1000)
            if not page:
                return found
            found.extend(page)


# -- retention --------------------------------------------------------------------------------


def prune(store: Store, *, older_than: timedelta = RETENTION, now: str | None = None) -> int:
    """Delete events older than `older_than` (never less than RETENTION), a batch per
    transaction; returns how many went."""
    keep = max(older_than, RETENTION)
    cutoff = ids.shift(now or ids.now(), -keep.total_seconds())
    # Along the oldest ids, which grow with time: no index on `at` (migration 0007) and a
    # board with fewer than a batch of old events is not read to its end under the write lock.
    oldest = sa.select(EV.c.id).order_by(EV.c.id).limit(PRUNE_BATCH).scalar_subquery()
    # never an event a webhook has not yet taken (core.services.hooks): its delivery would be lost
    untaken = sa.select(sa.func.min(t.hooks.c.cursor)).scalar_subquery()
    doomed = (
        sa.select(EV.c.id)
        .where(
            EV.c.id.in_(oldest),
            EV.c.at < cutoff,
            sa.or_(untaken.is_(None), EV.c.id <= untaken),
        )
        .order_by(EV.c.id)
    )
    total = 0
    while True:
        with store.transaction() as uow:
            ids_ = [int(i) for i in uow.conn.execute(doomed).scalars()]
            if ids_:
                uow.conn.execute(sa.delete(EV).where(EV.c.id.in_(ids_)))
        total += len(ids_)
        if len(ids_) < PRUNE_BATCH:
            return total
