"""Where agents work: a workflow's (or one task's) repository and base branch, and the task's
git worktree once its first run made it (CLI.md `workflow set --repository`, `task diff`).

`tasks.workspace` is the worktree's record (JSON: repository, base_branch, branch, path,
base_commit, host); it is written once, by a conditional update on its being NULL, so two
workers racing to make a task's worktree agree on one.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflows") as batch:
        batch.add_column(sa.Column("repository", sa.String(length=4000), nullable=True))
        batch.add_column(sa.Column("base_branch", sa.String(length=255), nullable=True))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("repository", sa.String(length=4000), nullable=True))
        batch.add_column(sa.Column("base_branch", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("workspace", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("workspace")
        batch.drop_column("base_branch")
        batch.drop_column("repository")
    with op.batch_alter_table("workflows") as batch:
        batch.drop_column("base_branch")
        batch.drop_column("repository")
