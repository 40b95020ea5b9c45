"""Statements on the arrival path, compiled once per dialect and run on the driver's cursor.

A Core statement executed through `Connection.execute` pays for cache-key generation, an
execution context and result processing on every call - several times the cost of the SQLite
statement itself, and the arrival path is bound by that Python overhead, not by the disk. So
the few fixed statements of that path are written once in Core (dialect-neutral), compiled
once per dialect, and executed on the DBAPI cursor of the caller's own connection (inside the
caller's transaction). Values must already be in driver form (str, int, bool, None).

Listeners on SQLAlchemy's cursor events do not see these statements; `STATS` counts them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

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

    def __call__(self, conn: Connection, values: Mapping[str, Any]) -> Result:
        if self._defaults:
            values = {**self._defaults, **values}
        order = self._order
        params: Any = tuple(map(values.get, order)) if order is not None else dict(values)
        with _cursor(conn, self.sql, params) as cursor:
            cursor.execute(self.sql, params)
            if cursor.description is None:
                return Result((), [], cursor.rowcount)
            names = tuple(d[0] for d in cursor.description)
            return Result(names, list(cursor.fetchall()), cursor.rowcount)

    def many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        """Run the statement once per row of `rows` in one driver call (executemany)."""
        params: list[Any]
        if self._order is not None:
            order = self._order
            defaults = self._defaults
            params = [tuple(map({**defaults, **r}.get, order)) for r in rows]
        else:
            params = [{**self._defaults, **r} for r in rows]
        with _cursor(conn, self.sql, params) as cursor:
            cursor.executemany(self.sql, params)
            return int(cursor.rowcount)


def run_driver_sql(conn: Connection, sql: str) -> None:
    """One fixed statement without parameters (BEGIN) on the connection's driver cursor."""
    with _cursor(conn, sql, ()) as cursor:
        cursor.execute(sql)


@contextmanager
def _cursor(conn: Connection, sql: str, params: Any) -> Iterator[Any]:
    """A driver cursor of `conn`'s own connection, counted in STATS, closed after use; a driver
    error comes out as the exception type `Connection.execute` raises (IntegrityError, ...)."""
    STATS["statements"] += 1
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    driver_error = conn.dialect.loaded_dbapi.Error
    try:
        yield cursor
    except driver_error as exc:
        raise sa.exc.DBAPIError.instance(sql, params, exc, driver_error) from exc
    finally:
        cursor.close()


STATS = {"statements": 0}
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
