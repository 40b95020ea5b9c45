"""Safe rooms for agents (issue 43 items 4 and 5, AGENTS.md `--sandbox`, CLI.md `--setup`).

- `agent_profiles.sandbox`: `none` or `bwrap` (the agent runs under bubblewrap);
- `agent_profiles.network`: `on` or `off` (under a sandbox, loopback only);
- `workflows.setup`: a shell command run in a new worktree before its first turn;
- `workflows.cleanup`: a shell command run in a worktree before it is removed.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_profiles") as batch:
        batch.add_column(
            sa.Column("sandbox", sa.String(length=20), nullable=False, server_default="none")
        )
        batch.add_column(
            sa.Column("network", sa.String(length=10), nullable=False, server_default="on")
        )
    with op.batch_alter_table("workflows") as batch:
        batch.add_column(sa.Column("setup", sa.Text(), nullable=True))
        batch.add_column(sa.Column("cleanup", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workflows") as batch:
        batch.drop_column("cleanup")
        batch.drop_column("setup")
    with op.batch_alter_table("agent_profiles") as batch:
        batch.drop_column("network")
        batch.drop_column("sandbox")
