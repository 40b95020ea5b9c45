"""Permission requests of ACP agents a person answers (CLI.md `permission`, AGENTS.md
`--permissions ask`).

A row leaves `pending` once (a conditional UPDATE decides who answered); a run that ends, or is
re-queued from a dead worker, cancels its pending rows. They go with their task (the foreign
key's cascade, as every other per-task table).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "permissions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("tool_call", sa.Text(), server_default="{}", nullable=False),
        sa.Column("options", sa.Text(), server_default="[]", nullable=False),
        sa.Column("state", sa.String(length=20), server_default="pending", nullable=False),
        sa.Column("option_id", sa.String(length=200), nullable=True),
        sa.Column("decided_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.Column("decided_at", sa.String(length=40), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_permissions_task", "permissions", ["task_id", "created_at"])
    op.create_index("ix_permissions_run", "permissions", ["run_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_permissions_run", table_name="permissions")
    op.drop_index("ix_permissions_task", table_name="permissions")
    op.drop_table("permissions")
