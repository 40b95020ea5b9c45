"""From card to merged change (issue 40): a workflow's remote, comments on a diff's lines.

`workflows.remote`: the git remote (a name or URL) its tasks' branches are pushed to
(`workflow set --remote`); `workflows.forge`: the forge its pull requests are opened on (JSON:
`kind`, `repo`, `url`, `token_env`; `workflow set --forge`). `comments.file` / `comments.line`:
a comment on line N of a file in the task's diff (`task comment --file --line`); both null
for a comment on the task.

Revision ID: 0025
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflows") as batch:
        batch.add_column(sa.Column("remote", sa.String(4000), nullable=True))
        batch.add_column(sa.Column("forge", sa.Text(), nullable=True))
    with op.batch_alter_table("comments") as batch:
        batch.add_column(sa.Column("file", sa.String(4000), nullable=True))
        batch.add_column(sa.Column("line", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("comments") as batch:
        batch.drop_column("line")
        batch.drop_column("file")
    with op.batch_alter_table("workflows") as batch:
        batch.drop_column("forge")
        batch.drop_column("remote")
