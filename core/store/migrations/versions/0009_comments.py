"""Comments on tasks (CLI.md `task comment` / `task comments`, the tool server's `comment`).

Each comment fires on_comment at its task's step; its row goes with its task (the foreign
key's cascade, as every other per-task table).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "comments",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_comments_task", "comments", ["task_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_comments_task", table_name="comments")
    op.drop_table("comments")
