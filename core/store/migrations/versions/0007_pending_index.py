"""ix_step_entries_pending holds only the non-terminal entries (issue 14, target 3).

It indexed every entry with `terminal` first, so closing one moved its index entry from the
`terminal = false` range into the `terminal = true` range, which nothing reads: at 1,000,000
entries that range is about 100 MB, and closing 100,000 entries spread across it rewrote most
of its pages. As a partial index on `terminal IS false` (as SQLAlchemy renders
`terminal.is_(False)` on each database, the form the recovery query uses), closing an entry only
deletes its index entry, and the index stays as small as the pending work.

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


def upgrade() -> None:
    op.drop_index("ix_step_entries_pending", table_name="step_entries")
    op.create_index(
        "ix_step_entries_pending",
        "step_entries",
        ["task_id", "step_id", "entry_seq"],
        unique=False,
        sqlite_where=sa.text("terminal IS 0"),
        postgresql_where=sa.text("terminal IS false"),
    )


def downgrade() -> None:
    op.drop_index("ix_step_entries_pending", table_name="step_entries")
    op.create_index(
        "ix_step_entries_pending",
        "step_entries",
        ["terminal", "task_id", "step_id", "entry_seq"],
        unique=False,
    )
