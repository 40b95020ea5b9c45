"""Keeping the board's records bounded: a session's transcript items pruned by age.

A transcript grows with every agent turn (AGENTS.md "What the board sees"); `laneway prune
--transcripts-older-than DURATION` deletes the items older than that and touches nothing else
(sessions, runs, tasks, events stay). Each session's newest item stays whatever its age: the
next item's `seq` is the session's highest plus one, so deleting the highest would hand out
numbers a reader already saw (`session log --after SEQ` would miss what comes next).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import attrs
import sqlalchemy as sa

from core import ids
from core.errors import LanewayError
from core.store import tables as t

if TYPE_CHECKING:
    from core.store.database import Store

ITEMS = t.transcript_items
BATCH: Final = 1000
"""Items deleted per transaction: a large prune never holds the write lock for long."""

_UNITS: Final = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_PART: Final = re.compile(r"(\d+)([wdhms])")


def parse_duration(text: str, *, what: str) -> timedelta:
    """`30d`, `12h`, `90m`, `45s`, `2w`, or several together (`1d12h`); a LanewayError naming
    `what` otherwise."""
    compact = text.strip().lower().replace(" ", "")
    parts = _PART.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise LanewayError(
            f"{what} {text!r}: expected a duration such as 30d, 12h, 90m, 45s or 1d12h"
        )
    return timedelta(seconds=sum(int(n) * _UNITS[u] for n, u in parts))


@attrs.frozen
class Pruned:
    cutoff: str
    """Items stamped before this moment were the candidates."""
    matched: int
    """How many items are older than the cutoff and may go (each session's newest stays)."""
    deleted: int

    def as_json(self, *, dry_run: bool) -> dict[str, Any]:
        return {
            "transcript_items_deleted": self.deleted,
            "transcript_items_matched": self.matched,
            "cutoff": self.cutoff,
            "dry_run": dry_run,
        }


def _doomed(cutoff: str) -> sa.ColumnElement[bool]:
    """Older than `cutoff`, and not its session's newest (a later item of it exists)."""
    later = ITEMS.alias("later")
    has_later = (
        sa.select(later.c.seq)
        .where(later.c.session_id == ITEMS.c.session_id, later.c.seq > ITEMS.c.seq)
        .exists()
    )
    return sa.and_(ITEMS.c.at < cutoff, has_later)


def prune_transcripts(
    store: Store, older_than: timedelta, *, dry_run: bool = False, now: str | None = None
) -> Pruned:
    """Delete the transcript items stamped more than `older_than` ago, but each session's
    newest, a batch per transaction; with `dry_run` only count them."""
    cutoff = ids.shift(now or ids.now(), -older_than.total_seconds())
    doomed = _doomed(cutoff)
    with store.read() as conn:
        matched = int(conn.execute(sa.select(sa.func.count()).where(doomed)).scalar_one())
    if dry_run or not matched:
        return Pruned(cutoff, matched, 0)
    deleted = 0
    while True:
        with store.transaction() as uow:
            keys = [
                (str(r.session_id), int(r.seq))
                for r in uow.conn.execute(
                    sa.select(ITEMS.c.session_id, ITEMS.c.seq).where(doomed).limit(BATCH)
                )
            ]
            if keys:
                uow.conn.execute(
                    sa.delete(ITEMS).where(sa.tuple_(ITEMS.c.session_id, ITEMS.c.seq).in_(keys))
                )
        deleted += len(keys)
        if len(keys) < BATCH:
            return Pruned(cutoff, matched, deleted)
