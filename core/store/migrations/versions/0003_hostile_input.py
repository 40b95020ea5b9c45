"""Agents get only what they need; a verdict is recorded once per run and seat.

- `agent_profiles.env_from` / `pass_env`: worker variables a profile takes or passes through
  (an agent no longer inherits the worker's whole environment).
- `workflow_step_decisions.run_id` with a unique index on (run_id, participant_id).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_profiles") as batch:
        batch.add_column(sa.Column("env_from", sa.Text(), server_default="{}", nullable=False))
        batch.add_column(sa.Column("pass_env", sa.Text(), server_default="[]", nullable=False))
    with op.batch_alter_table("workflow_step_decisions") as batch:
        batch.add_column(sa.Column("run_id", sa.String(length=64), nullable=True))
    op.create_index(
        "uq_decisions_run_participant",
        "workflow_step_decisions",
        ["run_id", "participant_id"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("uq_decisions_run_participant", table_name="workflow_step_decisions")
    with op.batch_alter_table("workflow_step_decisions") as batch:
        batch.drop_column("run_id")
    with op.batch_alter_table("agent_profiles") as batch:
        batch.drop_column("pass_env")
        batch.drop_column("env_from")
