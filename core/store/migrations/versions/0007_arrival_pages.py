"""Fewer pages per arrival: the pending-entry index holds only pending entries, and the event
log loses its index on `at` (issue 14).

- `ix_step_entries_pending` was (terminal, task_id, step_id, entry_seq) over every entry ever
  made: each arrival inserted into it and then moved its entry from the terminal=false range
  to the terminal=true range, two leaves of an index that only grows. Partial on
  `terminal IS false`, it holds the few pending entries; recovery's pending query (`terminal
  IS false`) reads it the same way.
- `ix_board_events_at` was written by every event and read only by pruning, which can walk
  the oldest ids instead.

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


def downgrade() -> None:
    op.create_index("ix_board_events_at", "board_events", ["at"])
    op.drop_index("ix_step_entries_pending", table_name="step_entries")
    op.create_index(
        "ix_step_entries_pending",
        "step_entries",
        ["terminal", "task_id", "step_id", "entry_seq"],
    )
