"""Real agents over ACP (issue 29): how a profile talks to its agent, what an agent reported
about its conversation, the transcript item by item, and what a run spent.

- `agent_profiles`: `protocol` (exec | acp), `permissions` (ask | allow | deny), `auto_allow`
  (JSON list of ACP tool kinds), `turn_timeout` and `idle_timeout` (seconds).
- `task_sessions.agent`: the agent's reported state (ACP session id, modes, config options...),
  JSON text.
- `transcript_items`: one row per item, numbered per session; it goes with its session (and so
  with its task) by foreign-key cascade, as every other row of a task does.
- `runs.usage`: cost and tokens the agent reported over the run, JSON text (NULL: none).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_profiles") as batch:
        batch.add_column(
            sa.Column("protocol", sa.String(length=20), server_default="exec", nullable=False)
        )
        batch.add_column(
            sa.Column("permissions", sa.String(length=20), server_default="ask", nullable=False)
        )
        batch.add_column(sa.Column("auto_allow", sa.Text(), server_default="[]", nullable=False))
        batch.add_column(
            sa.Column("turn_timeout", sa.Float(), server_default="3600", nullable=False)
        )
        batch.add_column(
            sa.Column("idle_timeout", sa.Float(), server_default="900", nullable=False)
        )
    with op.batch_alter_table("task_sessions") as batch:
        batch.add_column(sa.Column("agent", sa.Text(), server_default="{}", nullable=False))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("usage", sa.Text(), nullable=True))
    op.create_table(
        "transcript_items",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("text", sa.Text(), server_default="", nullable=False),
        sa.Column("data", sa.Text(), server_default="{}", nullable=False),
        sa.Column("at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["task_sessions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("session_id", "seq"),
    )
    op.create_index("ix_transcript_items_run", "transcript_items", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_transcript_items_run", table_name="transcript_items")
    op.drop_table("transcript_items")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("usage")
    with op.batch_alter_table("task_sessions") as batch:
        batch.drop_column("agent")
    with op.batch_alter_table("agent_profiles") as batch:
        batch.drop_column("idle_timeout")
        batch.drop_column("turn_timeout")
        batch.drop_column("auto_allow")
        batch.drop_column("permissions")
        batch.drop_column("protocol")
