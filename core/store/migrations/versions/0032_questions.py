"""Questions an agent asks a person (issue 41 item 6; CLI.md `question`, AGENTS.md `ask` and
`elicitation/create`).

A row leaves `pending` once (a conditional UPDATE decides who answered); a run that ends, or is
re-queued from a dead worker, cancels its pending rows, as permission requests. They go with
their task (the foreign key's cascade).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "questions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("message", sa.Text(), server_default="", nullable=False),
        sa.Column("fields", sa.Text(), server_default="[]", nullable=False),
        sa.Column("state", sa.String(length=20), server_default="pending", nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("answered_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.Column("answered_at", sa.String(length=40), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_questions_task", "questions", ["task_id", "created_at"])
    op.create_index("ix_questions_run", "questions", ["run_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_questions_run", table_name="questions")
    op.drop_index("ix_questions_task", table_name="questions")
    op.drop_table("questions")
