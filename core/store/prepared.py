"""Statements on the arrival path, compiled once per dialect and run on the driver's cursor.

A Core statement executed through `Connection.execute` pays for cache-key generation, an
execution context and result processing on every call - several times the cost of the SQLite
statement itself, and the arrival path is bound by that Python overhead, not by the disk. So
the few fixed statements of that path are written once in Core (dialect-neutral), compiled
once per dialect, and executed on the DBAPI cursor of the caller's own connection (inside the
caller's transaction). Values must already be in driver form (str, int, bool, None).

On PostgreSQL every statement is a round trip, and the arrival path is bound by them: so a
statement nothing waits for (a settle, an entry's close, a savepoint, the outbox's insert) can
be deferred (`defer`), and goes in one psycopg pipeline with the next statement on the
connection, or with the COMMIT; a transaction's BEGIN goes with its first statement.

Listeners on SQLAlchemy's cursor events do not see these statements; `STATS` counts them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql.compiler import SQLCompiler


def fixed_in(column: sa.ColumnElement[Any], values: tuple[str, ...]) -> sa.ColumnElement[bool]:
    """`column IN (...)` over constants of ours, rendered into the SQL text itself."""
    for value in values:
        if "'" in value:
            raise ValueError(f"not a plain constant: {value!r}")
    return column.in_([sa.literal_column(f"'{v}'") for v in sorted(values)])


def insert_of(table: sa.Table, keys: tuple[str, ...]) -> sa.Insert:
    """An INSERT of exactly `keys`, each bound by its own name."""
    return sa.insert(table).values({k: sa.bindparam(k) for k in keys})


class Result:
    """What the arrival path reads back: rows as tuples with their column names."""

    def __init__(self, names: tuple[str, ...], rows: list[tuple[Any, ...]], rowcount: int):
        self.names = names
        self._rows = rows
        self.rowcount = rowcount

    def first(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        if len(self._rows) != 1:
            raise sa.exc.NoResultFound("expected exactly one row")
        return self._rows[0][0]

    def rows(self) -> list[tuple[Any, ...]]:
        return self._rows

    def mappings(self) -> Iterator[dict[str, Any]]:
        return (dict(zip(self.names, row, strict=True)) for row in self._rows)

    def mapping(self) -> dict[str, Any] | None:
        return next(self.mappings(), None)


class Prepared:
    def __init__(self, statement: sa.ClauseElement, dialect: Dialect) -> None:
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        self.sql = compiled.string
        if "POSTCOMPILE" in self.sql:
            raise ValueError("prepared statements cannot hold expanding IN lists: use fixed_in()")
        self._order = tuple(compiled.positiontup or ()) if compiled.positional else None
        self._defaults = dict(compiled.params)
        dml = compiled.isinsert or compiled.isupdate or compiled.isdelete
        self._rowless = dml and not compiled.effective_returning and not compiled.isplaintext
        """An INSERT, UPDATE or DELETE without RETURNING: no rows to read (nor their
        description, which psycopg builds on every access)."""
        self._names: tuple[str, ...] | None = None
        """The result's column names, the same for every run (read from the first)."""

    def params(self, values: Mapping[str, Any]) -> Any:
        """`values` in the driver's parameter form for this statement."""
        if self._defaults:
            values = {**self._defaults, **values}
        order = self._order
        return tuple(map(values.get, order)) if order is not None else dict(values)

    def __call__(self, conn: Connection, values: Mapping[str, Any]) -> Result:
        sql, params = self.sql, self.params(values)
        pipelines = self._order is None  # psycopg's named parameters: PostgreSQL
        cursor = _send(conn, sql, params, pipelines=pipelines, begins=pipelines)
        if self._rowless:
            return Result((), [], cursor.rowcount)
        try:  # SQLite steps past the first row as it fetches: its errors can come here
            names = self._names
            if names is None:
                description = cursor.description
                if description is None:
                    return Result((), [], cursor.rowcount)
                names = self._names = tuple(d[0] for d in description)
            return Result(names, cursor.fetchall(), cursor.rowcount)
        except conn.dialect.loaded_dbapi.Error as exc:
            raise _translated(conn, sql, params, exc) from exc

    def many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        """Run the statement once per row of `rows` in one driver call (executemany)."""
        params: list[Any]
        if self._order is not None:
            order = self._order
            defaults = self._defaults
            params = [tuple(map({**defaults, **r}.get, order)) for r in rows]
        else:
            params = [{**self._defaults, **r} for r in rows]
        cursor = _send(conn, self.sql, params, many=True, pipelines=self._order is None)
        return int(cursor.rowcount)


def run_driver_sql(conn: Connection, sql: str) -> None:
    """One fixed statement without parameters (BEGIN, SAVEPOINT) on the connection's driver
    cursor."""
    _count_savepoint(sql)
    _send(conn, sql, None)


def _send(
    conn: Connection,
    sql: str,
    params: Any,
    *,
    many: bool = False,
    pipelines: bool = True,
    begins: bool = False,
) -> Any:
    """Run `sql` on `conn`'s driver cursor (counted in STATS) and return the cursor; a driver
    error comes out translated (`_translated`).

    :param pipelines: send it in one pipeline with the statements deferred so far, if any.
    :param begins: also when none are deferred but the statement opens the transaction, so
        that its BEGIN goes in the statement's round trip."""
    STATS["statements"] += 1
    info = conn.info
    dbapi = conn.connection.dbapi_connection
    cursor = _cursor_of(info, dbapi)
    run = cursor.executemany if many else cursor.execute
    try:
        pending = info.get(_PENDING) if pipelines else None
        if pending or (begins and _opens_transaction(dbapi)):
            _pipelined(dbapi, pending, run, sql, params, _cursor_of(info, dbapi, _SCRATCH))
        elif params is None:
            run(sql)
        else:
            run(sql, params)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _translated(conn, sql, params, exc) from exc
    return cursor


# -- statements whose result nothing waits for ----------------------------------------------------

Check = Callable[[int], None]
"""Given a deferred statement's row count, raises when it is not what the caller needed."""


class Deferred:
    """A statement queued on a connection until the next statement sent on it."""

    __slots__ = ("check", "many", "params", "sent", "sql")

    def __init__(self, sql: str, params: Any, check: Check | None, many: bool = False) -> None:
        self.sql = sql
        self.params = params
        self.check = check
        self.sent = False
        self.many = many
        """`params` is a list of parameter sets, sent as one executemany."""


_PENDING = "laneway_deferred"


def defer(
    conn: Connection,
    statement: sa.ClauseElement,
    values: Mapping[str, Any],
    check: Check | None = None,
) -> None:
    """Run `statement` in `conn`'s transaction without waiting for it here.

    On PostgreSQL the statement is queued and sent in one pipeline with the next statement on
    the connection (a prepared one, one through SQLAlchemy - `follow_deferred` -, or the
    flush before COMMIT, `flush_deferred`): one round trip for both. `check` gets its row
    count then, and what it raises comes out of that later call, inside the same transaction,
    so it still rolls everything back. Elsewhere (SQLite, where there are no round trips) the
    statement runs, and is checked, at once. Only for statements whose result the caller does
    not need before its next statement."""
    found = _prepared(conn, statement)
    if found._order is not None or not _pipelines(conn):
        result = found(conn, values)
        if check is not None:
            check(result.rowcount)
        return
    conn.info.setdefault(_PENDING, []).append(Deferred(found.sql, found.params(values), check))


def defer_many(
    conn: Connection, statement: sa.ClauseElement, rows: Sequence[Mapping[str, Any]]
) -> None:
    """`execute_many`, deferred as `defer` defers (the outbox's insert, which ends a
    transaction: on PostgreSQL it goes in one round trip with the COMMIT)."""
    found = _prepared(conn, statement)
    if found._order is not None or not _pipelines(conn):
        found.many(conn, rows)
        return
    params = [{**found._defaults, **r} for r in rows]
    conn.info.setdefault(_PENDING, []).append(Deferred(found.sql, params, None, many=True))


def defer_driver_sql(conn: Connection, sql: str) -> Deferred:
    """`run_driver_sql`, deferred as `defer` defers."""
    if not _pipelines(conn):
        run_driver_sql(conn, sql)
        deferred = Deferred(sql, None, None)
        deferred.sent = True
        return deferred
    _count_savepoint(sql)
    deferred = Deferred(sql, None, None)
    conn.info.setdefault(_PENDING, []).append(deferred)
    return deferred


def flush_deferred(conn: Connection, *, commit: bool = False) -> None:
    """Send what `defer` queued on `conn` now (a statement of another path follows).

    :param commit: and COMMIT the transaction in the same round trip (the unit of work's end:
        SQLAlchemy's own COMMIT then finds nothing left to commit) - unless a queued statement
        has a check, which must decide before anything commits, or nothing is queued: the
        COMMIT is then left to SQLAlchemy."""
    pending = _pending_of(conn)
    if not pending:
        return
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    commit = commit and all(item.check is None for item in pending)
    scratch = _cursor_of(conn.info, dbapi)
    try:
        # counted: the COMMIT is this round trip's, every queued statement rides with it
        _pipelined(dbapi, pending, _commit_of(scratch) if commit else None, "", None, scratch)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _translated(conn, "", None, exc) from exc


def _commit_of(cursor: Any) -> Callable[[str, Any], None]:
    def commit(_sql: str, _params: Any) -> None:
        # COMMIT as a statement of the pipeline (psycopg's `commit()` would sync on its own,
        # a round trip more); psycopg then finds the connection idle, and so does SQLAlchemy's
        # COMMIT at the end of the unit of work, which sends nothing
        cursor.execute("COMMIT", prepare=False)

    return commit


def drop_deferred(conn: Connection) -> None:
    """Forget what is queued on `conn` (its transaction, or savepoint, is being rolled back)."""
    pending = _pending_of(conn)
    if pending:
        pending.clear()


def follow_deferred(conn: Any, *_args: Any) -> None:
    """A `before_cursor_execute` listener: a statement sent through SQLAlchemy first sends
    what is queued, so statements reach the server in the order they were issued."""
    if _pending_of(conn):
        flush_deferred(conn)


def _pending_of(conn: Connection) -> list[Deferred] | None:
    if conn.invalidated or conn.closed:
        return None  # nothing to send on a connection that is gone (and no info to read)
    found: list[Deferred] | None = conn.info.get(_PENDING)
    return found


def _pipelines(conn: Connection) -> bool:
    return hasattr(conn.connection.dbapi_connection, "pipeline")


def _pipelined(
    dbapi: Any,
    pending: list[Deferred] | None,
    send: Callable[[str, Any], Any] | None,
    sql: str,
    params: Any,
    scratch: Any = None,
) -> None:
    """Send the queued statements, then `send(sql, params)` (if any), in one psycopg pipeline
    (one round trip, BEGIN included when the transaction opens here); then check the queued
    statements' row counts, in order.

    :param scratch: a cursor for the queued statements whose row count nothing checks (their
        results are not read; a checked one gets a cursor of its own, whose row count the
        pipeline fills in); None: one made for this pipeline."""
    queued = list(pending or ())
    if pending:
        pending.clear()
    checked: list[tuple[Deferred, Any]] = []
    opens = _opens_transaction(dbapi)
    # statements that rode in the round trip of another
    STATS["piggybacked"] += len(queued) - (0 if send is not None else 1)
    try:
        with dbapi.pipeline() as pipeline:
            if opens and _send_begin(dbapi, pipeline):
                STATS["pipelined_begins"] += 1
            for item in queued:
                STATS["statements"] += 1
                if item.check is not None:
                    cursor = dbapi.cursor()
                    checked.append((item, cursor))
                else:
                    if scratch is None:
                        scratch = dbapi.cursor()
                    cursor = scratch
                item.sent = True
                if item.many:
                    cursor.executemany(item.sql, item.params)
                elif item.params is None:
                    cursor.execute(item.sql, prepare=False)
                else:
                    cursor.execute(item.sql, item.params)
            if send is not None:
                send(sql, params)
            # no explicit sync: leaving the block sends the one Sync and reads every result
            # (a sync of our own, then the block's, would be two round trips)
        for item, cursor in checked:
            assert item.check is not None
            item.check(cursor.rowcount)
    finally:
        for _item, cursor in checked:
            cursor.close()


BEGIN_CHECKED_RELEASES: Final = ((3, 1), (3, 4))
"""The psycopg releases, from and before, whose pipeline internals `_send_begin` relies on, as
read in 3.1.20, 3.2.10 and 3.3.9 (a `command_queue` of commands to send and a `result_queue`
with None for a command whose result nobody reads). A later release begins the transaction
itself, one round trip more, until its internals are read and this range is widened."""


@functools.cache
def _begin_fits(driver: Any) -> bool:
    """Whether `driver` (the psycopg module) is a release `_send_begin` was checked against."""
    try:
        release = tuple(int(part) for part in str(driver.__version__).split(".")[:2])
    except (AttributeError, ValueError):  # not psycopg as we know it
        return False
    earliest, before = BEGIN_CHECKED_RELEASES
    return earliest <= release < before


def _send_begin(dbapi: Any, pipeline: Any) -> bool:
    """Send the transaction's BEGIN as the first command of `pipeline`, so that it goes in the
    pipeline's one round trip; False (psycopg then begins the transaction itself) where that
    cannot be done as psycopg would.

    psycopg begins a transaction at its first statement, and in a pipeline it then syncs at
    once (`_start_query`): the BEGIN would be a round trip of its own. Sent here, on the
    libpq connection, the connection is no longer idle when the first statement is queued, so
    psycopg adds no BEGIN (and no Sync) of its own; its result (nothing to read) is the
    pipeline's first, as psycopg queues a command's."""
    # psycopg's pipeline queues are not public API: only in the releases they were read in
    results = getattr(pipeline, "result_queue", None)
    if (
        not _begin_fits(sys.modules[type(dbapi).__module__.partition(".")[0]])
        or results is None
        or results
        or getattr(pipeline, "command_queue", True)
        or dbapi.isolation_level is not None
        or dbapi.read_only is not None
        or dbapi.deferrable is not None
    ):
        return False  # psycopg's BEGIN would not be a plain one, or the pipeline is not fresh
    dbapi.pgconn.send_query_params(b"BEGIN", None)
    results.append(None)
    return True


def _translated(conn: Connection, sql: str, params: Any, exc: Exception) -> sa.exc.StatementError:
    """`exc`, a driver error, as the exception type `Connection.execute` raises (IntegrityError,
    ...)."""
    return sa.exc.DBAPIError.instance(sql, params, exc, conn.dialect.loaded_dbapi.Error)


def _count_savepoint(sql: str) -> None:
    if sql.startswith("SAVEPOINT"):
        STATS["savepoints"] += 1


_CURSOR = "laneway_cursor"
_SCRATCH = "laneway_scratch_cursor"


def _cursor_of(info: dict[Any, Any], dbapi: Any, key: str = _CURSOR) -> Any:
    """The driver cursor laneway's statements run on, one per driver connection, kept in the
    connection's info (which SQLAlchemy clears when it replaces the driver connection): a
    statement's rows are read before the next statement runs, so one cursor serves them all,
    without a cursor made and closed per statement. (`_SCRATCH`: a second one, for the
    deferred statements sent in a pipeline with a statement on the first.)"""
    cursor = info.get(key)
    if cursor is None or cursor.connection is not dbapi:
        cursor = info[key] = dbapi.cursor()
    return cursor


def _opens_transaction(dbapi: Any) -> bool:
    """Whether a statement on this psycopg connection would begin its transaction (idle, not
    autocommit); False for any other driver."""
    pgconn = getattr(dbapi, "pgconn", None)  # (`dbapi.info` builds an object per access)
    return pgconn is not None and pgconn.transaction_status == _PG_IDLE and not dbapi.autocommit


_PG_IDLE = 0
"""psycopg's `TransactionStatus.IDLE`: connected, no transaction open."""
STATS = {
    "statements": 0,
    "savepoints": 0,
    "pipelined_begins": 0,
    "piggybacked": 0,
}
"""Counted for the benchmarks: statements run here, how many were SAVEPOINTs, how many BEGINs
went in a pipeline with a statement, and how many statements went in the round trip of another
statement or of the COMMIT (PostgreSQL pipelines)."""
_cache: dict[tuple[int, str], tuple[sa.ClauseElement, Prepared]] = {}


def _prepared(conn: Connection, statement: sa.ClauseElement) -> Prepared:
    key = (id(statement), conn.dialect.name)
    found = _cache.get(key)
    if found is None or found[0] is not statement:
        found = (statement, Prepared(statement, conn.dialect))
        _cache[key] = found
    return found[1]


def execute(conn: Connection, statement: sa.ClauseElement, values: Mapping[str, Any]) -> Result:
    """Run `statement` as prepared driver SQL. Statements must live for the process
    (module-level constants): the cache is keyed by identity and dialect."""
    return _prepared(conn, statement)(conn, values)


def execute_many(
    conn: Connection, statement: sa.ClauseElement, rows: Sequence[Mapping[str, Any]]
) -> int:
    """`execute` for many rows of values in one driver call; returns the driver's rowcount."""
    return _prepared(conn, statement).many(conn, rows)
