"""The runaway-loop limit: a workflow's max_step_arrivals, a task's halt flag, arrival counts.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflows") as batch:
        batch.add_column(
            sa.Column("max_step_arrivals", sa.Integer(), server_default="25", nullable=False)
        )
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("loop_halted_step_id", sa.String(length=64), nullable=True))
        batch.add_column(
            sa.Column("loop_generation", sa.Integer(), server_default="0", nullable=False)
        )
    op.create_table(
        "task_step_arrivals",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=64), nullable=False),
        sa.Column("arrivals", sa.Integer(), server_default="0", nullable=False),
        sa.Column("generation", sa.Integer(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("task_id", "step_id"),
    )


def downgrade() -> None:
    op.drop_table("task_step_arrivals")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("loop_generation")
        batch.drop_column("loop_halted_step_id")
    with op.batch_alter_table("workflows") as batch:
        batch.drop_column("max_step_arrivals")
