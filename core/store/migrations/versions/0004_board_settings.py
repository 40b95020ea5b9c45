"""The board's own settings (features, the catalogue version) and durable operation ids.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    board = op.create_table(
        "board_settings",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("catalogue_version", sa.Integer(), server_default="0", nullable=False),
        sa.Column("features", sa.Text(), server_default="{}", nullable=False),
        sa.Column("updated_at", sa.String(length=40), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    # The one row every process reads; `{}` means every feature at its default.
    op.bulk_insert(board, [{"id": 1, "catalogue_version": 0, "features": "{}"}])
    op.create_table(
        "applied_operations",
        sa.Column("operation_id", sa.String(length=400), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("epoch", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("operation_id"),
    )
    op.create_index(
        "ix_applied_operations_created", "applied_operations", ["created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_applied_operations_created", table_name="applied_operations")
    op.drop_table("applied_operations")
    op.drop_table("board_settings")
