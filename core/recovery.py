"""The startup recovery scan over non-terminal step entries (spec AC-B9)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import sqlalchemy as sa

from core.store import tables as t

if TYPE_CHECKING:
    from core.host import Host


@attrs.frozen
class RecoveryReport:
    scanned: int = 0
    redispatched: int = 0
    skipped: dict[str, int] = attrs.field(factory=dict)
    errors: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "scanned": self.scanned,
            "redispatched": self.redispatched,
            "skipped": dict(self.skipped),
            "errors": self.errors,
        }


def scan(host: Host) -> RecoveryReport:
    E = t.step_entries
    with host.store.read() as conn:
        pending = conn.execute(
            sa.select(sa.func.count()).where(E.c.terminal.is_(False))
        ).scalar_one()
    return RecoveryReport(scanned=int(pending))
