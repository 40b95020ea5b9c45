"""The board's event log (outbox) that `laneway serve` streams.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "board_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
        ),
        sa.Column("type", sa.String(length=40), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=True),
        sa.Column("at", sa.String(length=40), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_board_events_task", "board_events", ["task_id", "id"])
    op.create_index("ix_board_events_at", "board_events", ["at"])


def downgrade() -> None:
    op.drop_index("ix_board_events_at", table_name="board_events")
    op.drop_index("ix_board_events_task", table_name="board_events")
    op.drop_table("board_events")
