"""The board's own settings, shared by every process on one database.

One row of `board_settings` holds:

- `features`: which features are on for the board (Office, and any a plugin declares), as
  JSON (`{"office": false}`; a missing key means on). Every process without a per-process override
  acts with these.
- `catalogue_version`: a counter moved in the same transaction as every change to what a
  process caches or builds once (workflows and their steps, agent profiles, the workspace's
  office workflow, the features). A process compares it with the version it last saw at the
  start of each transaction and each read (one primary-key read, no catalogue read) and
  reloads what it cached only when it moved. (Seats, tasks, runs and the ledger are read
  where they are used and need no version.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core import ids
from core.errors import LanewayError
from core.plugin.features import BUILTIN, Features
from core.store import prepared
from core.store import tables as t
from core.store.database import UnitOfWork

B = t.board_settings
ROW_ID = 1

_READ = sa.select(B.c.catalogue_version, B.c.features).where(B.c.id == ROW_ID)
_BUMP = (
    sa.update(B)
    .where(B.c.id == ROW_ID)
    .values(catalogue_version=B.c.catalogue_version + 1, updated_at=sa.bindparam("stamp"))
)
_WRITE_FEATURES = (
    sa.update(B)
    .where(B.c.id == ROW_ID)
    .values(
        features=sa.bindparam("features"),
        catalogue_version=B.c.catalogue_version + 1,
        updated_at=sa.bindparam("stamp"),
    )
)
_VERSION = sa.select(B.c.catalogue_version).where(B.c.id == ROW_ID)


@attrs.frozen
class BoardState:
    version: int
    features: Features


_NAME = re.compile(r"^[a-z_]+$")


def features_from_json(text: str | None) -> Features:
    """The stored switches; anything unreadable falls back to the default, so a hand-edited
    row never keeps a process from starting. A switch whose plugin is no longer installed is
    kept: it decides nothing while no kind declares its feature."""
    try:
        raw: Any = json.loads(text or "{}")
    except ValueError:
        raw = {}
    if not isinstance(raw, dict):
        raw = {}
    return Features(
        {
            name: on
            for name, on in raw.items()
            if isinstance(name, str) and _NAME.match(name) and isinstance(on, bool)
        }
    )


def features_json(features: Features) -> str:
    return json.dumps(features.as_dict(), sort_keys=True, separators=(",", ":"))


def read(conn: Connection) -> BoardState:
    """The board's version and features, as of this connection's transaction."""
    row = prepared.execute(conn, _READ, {}).first()
    if row is None:  # a database whose row was deleted by hand: the defaults
        return BoardState(0, Features())
    return BoardState(int(row[0]), features_from_json(row[1]))


def version(conn: Connection) -> int:
    """The catalogue version alone: the check every transaction and read makes."""
    found = prepared.execute(conn, _VERSION, {}).scalar()
    return int(found) if found is not None else 0


def bump(uow: UnitOfWork) -> None:
    """Move the catalogue version, inside the changing transaction."""
    uow.run(_BUMP, {"stamp": ids.now()})


def write_features(
    uow: UnitOfWork, changes: Mapping[str, bool], known: Iterable[str]
) -> BoardState:
    """Apply `changes` to the board's switches (and move the version); returns the new state.

    :param known: the features a switch may name: the built-in ones and those the loaded
        plugins declare (`Registry.declared_features`)."""
    names = sorted(set(known) | set(BUILTIN))
    unknown = sorted(set(changes) - set(names))
    if unknown:
        raise LanewayError(f"unknown feature {unknown[0]!r} (known: {', '.join(names)})")
    for name, value in changes.items():
        if not isinstance(value, bool):
            raise LanewayError(f"feature {name!r}: must be true or false, not {value!r}")
    current = read(uow.conn)
    features = current.features.switched(**changes)
    uow.run(_WRITE_FEATURES, {"features": features_json(features), "stamp": ids.now()})
    version = uow.run(_VERSION, {}).scalar()
    return BoardState(int(version or 0), features)
