"""Indexes for the board's pages (issue 28): `GET /api/board?workflow=W[&step=S]&limit=N
&cursor=C` reads a workflow's (or a lane's) tasks oldest first from where the last page
ended; with these a page at 100,000 tasks is an index range read, not a scan and a sort.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_tasks_workflow_created", "tasks", ["workflow_id", "created_at", "id"])
    op.create_index("ix_tasks_step_created", "tasks", ["workflow_step_id", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_tasks_step_created", table_name="tasks")
    op.drop_index("ix_tasks_workflow_created", table_name="tasks")
