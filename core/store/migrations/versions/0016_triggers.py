"""Every declared trigger fires (issue 24 items 2-5): subtasks, blockers, heartbeats, budgets.

- `tasks.parent_id` (`task create --parent`) and `tasks.blocked_by` (a JSON copy of the task's
  rows of `task_blockers`, written in the same transaction);
- `task_blockers`: B blocks T, read by the blocker when it reaches its terminal step;
- `workflow_steps.heartbeat_seconds`: on_heartbeat once per slot of that many seconds;
- `trigger_outbox`: a trigger whose cause committed and whose delivery has not yet run;
- `budgets` and `budget_alerts` (one row per budget, threshold and period that fired).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("parent_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("blocked_by", sa.Text(), nullable=True))
        batch.create_index("ix_tasks_parent", ["parent_id"])
    with op.batch_alter_table("workflow_steps") as batch:
        batch.add_column(sa.Column("heartbeat_seconds", sa.Integer(), nullable=True))
    op.create_table(
        "task_blockers",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("blocker_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["blocker_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("task_id", "blocker_id"),
    )
    op.create_index("ix_task_blockers_blocker", "task_blockers", ["blocker_id"])
    op.create_table(
        "trigger_outbox",
        sa.Column("operation_id", sa.String(length=400), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("trigger", sa.String(length=40), nullable=False),
        sa.Column("payload", sa.Text(), server_default="{}", nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("operation_id"),
    )
    op.create_table(
        "budgets",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=20), nullable=False),
        sa.Column("ref", sa.String(length=64), nullable=False),
        sa.Column("limit_usd", sa.Float(), nullable=False),
        sa.Column("period", sa.String(length=20), server_default="total", nullable=False),
        sa.Column("thresholds", sa.Text(), server_default="[80, 100]", nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.Column("updated_at", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("scope", "ref", "period", name="uq_budgets_scope"),
    )
    op.create_table(
        "budget_alerts",
        sa.Column("budget_id", sa.String(length=64), nullable=False),
        sa.Column("threshold", sa.Integer(), nullable=False),
        sa.Column("period_start", sa.String(length=40), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["budget_id"], ["budgets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("budget_id", "threshold", "period_start"),
    )


def downgrade() -> None:
    op.drop_table("budget_alerts")
    op.drop_table("budgets")
    op.drop_table("trigger_outbox")
    op.drop_index("ix_task_blockers_blocker", table_name="task_blockers")
    op.drop_table("task_blockers")
    with op.batch_alter_table("workflow_steps") as batch:
        batch.drop_column("heartbeat_seconds")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index("ix_tasks_parent")
        batch.drop_column("blocked_by")
        batch.drop_column("parent_id")
