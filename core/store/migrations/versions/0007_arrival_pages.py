"""Fewer pages written per arrival (issue 14): every index an arrival maintains either serves
a query or goes.

- `ix_step_entries_pending` was (terminal, task_id, step_id, entry_seq) over every entry ever
  made: each arrival inserted into it and then moved its entry from the terminal=false range
  to the terminal=true range, two leaves of an index that only grows. Partial on
  `terminal IS false`, it holds the few pending entries; recovery's pending query and the
  open-time probe (`terminal IS false`) read it as before.
- `ix_board_events_at` was written by every event and read only by pruning, whose
  `ORDER BY id LIMIT` reads from the oldest ids instead (ids grow with time).
- `ix_board_events_task` was written by every event (a leaf per task touched, split often as
  each task's run of ids grows in the middle of the index) and read only by a `?task=`
  stream's catch-up after a Last-Event-ID, which reads the events after that id along the
  primary key instead: the events it would otherwise page through anyway.
- SQLite: `step_entry_markers` becomes a WITHOUT ROWID table: its rows live in the primary-key
  b-tree itself, one b-tree per marker write instead of two (nothing refers to its rowid, and
  no table references it, so the rebuild cascades nothing). PostgreSQL has no such thing.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_PENDING = sa.column("terminal", sa.Boolean()).is_(False)


def upgrade() -> None:
    op.drop_index("ix_step_entries_pending", table_name="step_entries")
    op.create_index(
        "ix_step_entries_pending",
        "step_entries",
        ["task_id", "step_id", "entry_seq"],
        sqlite_where=_PENDING,
        postgresql_where=_PENDING,
    )
    op.drop_index("ix_board_events_at", table_name="board_events")
    op.drop_index("ix_board_events_task", table_name="board_events")
    if op.get_bind().dialect.name == "sqlite":
        _markers_rowid(with_rowid=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _markers_rowid(with_rowid=True)
    op.create_index("ix_board_events_task", "board_events", ["task_id", "id"])
    op.create_index("ix_board_events_at", "board_events", ["at"])
    op.drop_index("ix_step_entries_pending", table_name="step_entries")
    op.create_index(
        "ix_step_entries_pending",
        "step_entries",
        ["terminal", "task_id", "step_id", "entry_seq"],
    )


def _markers_rowid(*, with_rowid: bool) -> None:
    """Rebuild step_entry_markers (batch mode copies the rows) with or without a rowid."""
    with op.batch_alter_table(
        "step_entry_markers", recreate="always", table_kwargs={"sqlite_with_rowid": with_rowid}
    ):
        pass
