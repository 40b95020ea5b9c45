"""Schedules (issue 42 item 4): `schedules`, a task created once per slot of `every_seconds`;
and `person_waits` (issue 42 item 2): why a task waits for a person, beyond a permission.

`last_slot` is the start of the last slot that created its task: a conditional UPDATE that
raises it (its row count decides) and the task's insert share one transaction, so of any number
of processes running the scheduler exactly one creates a slot's task.

Revision ID: 0029
Revises: 0027
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "workflow_id",
            sa.String(64),
            sa.ForeignKey("workflows.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("step_id", sa.String(64), nullable=True),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("every_seconds", sa.BigInteger, nullable=False),
        sa.Column("last_slot", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )

    op.create_table(
        "person_waits",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("reason", sa.String(20), primary_key=True),
        sa.Column("data", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("person_waits")
    op.drop_table("schedules")
