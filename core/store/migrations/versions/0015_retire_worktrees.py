"""A workflow's worktrees retired when its tasks reach the terminal step (issue 23 item 3).

`workflows.retire_worktrees`: a task arriving at the workflow's terminal step has its worktree
retired as archiving does (uncommitted work committed to its branch, the checkout removed, the
branch kept). Off by default: a finished task's worktree stays until it is archived.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflows") as batch:
        batch.add_column(
            sa.Column("retire_worktrees", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("workflows") as batch:
        batch.drop_column("retire_worktrees")
