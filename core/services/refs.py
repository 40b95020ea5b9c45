"""Naming a row as CLI.md allows: by its id, or by a unique suffix of at least 6 characters of
it (the board page shows the last 8)."""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.errors import LanewayError, NotFound

MIN_SUFFIX: Final = 6


def resolve_id(conn: Connection, id_column: sa.Column[Any], ref: str, what: str) -> str:
    """The id `ref` names in `id_column`'s table: an exact id, else the one id ending in it.

    NotFound when none does; a LanewayError when the suffix is shorter than MIN_SUFFIX or
    more than one id ends in it (naming a few of them)."""
    exact = conn.execute(sa.select(id_column).where(id_column == ref)).scalar()
    if exact is not None:
        return str(exact)
    if len(ref) < MIN_SUFFIX:
        raise NotFound(f"no {what} {ref!r} (a suffix names one with {MIN_SUFFIX}+ characters)")
    # LIKE with the suffix's wildcards escaped: an id is letters and digits, but a ref is input
    pattern = "%" + ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    found = [
        str(v)
        for v in conn.execute(
            sa.select(id_column).where(id_column.like(pattern, escape="\\")).limit(3)
        ).scalars()
    ]
    if not found:
        raise NotFound(f"no {what} {ref!r}")
    if len(found) > 1:
        raise LanewayError(f"{what} {ref!r} is ambiguous: {', '.join(found)}, ...")
    return found[0]
