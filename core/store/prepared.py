"""Statements on the arrival path, compiled once per dialect and run as driver SQL.

A Core statement executed through `Connection.execute` pays for cache-key generation, an
execution context and result processing on every call - several times the cost of the SQLite
statement itself. The arrival path runs a handful of fixed statements, so each is written once
in Core (dialect-neutral), compiled once for the store's dialect, and executed with
`exec_driver_sql`. Values must already be in driver form (str, int, bool, None).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, CursorResult, Dialect
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


class Prepared:
    def __init__(self, statement: sa.ClauseElement, dialect: Dialect) -> None:
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        self.sql = compiled.string
        if "POSTCOMPILE" in self.sql:
            raise ValueError("prepared statements cannot hold expanding IN lists: use fixed_in()")
        self._order = tuple(compiled.positiontup or ()) if compiled.positional else None
        self._defaults = dict(compiled.params)

    def __call__(self, conn: Connection, values: Mapping[str, Any]) -> CursorResult[Any]:
        if self._defaults:
            values = {**self._defaults, **values}
        params: Any
        if self._order is not None:
            params = tuple(values.get(name) for name in self._order)
        else:
            params = dict(values)
        return conn.exec_driver_sql(self.sql, params)
