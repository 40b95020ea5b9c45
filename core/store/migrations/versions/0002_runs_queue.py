"""The runs queue for many workers: attempts and a per-run attempt limit, and each agent's count
of claimed runs (the row a claim locks and bumps, so per-agent limits hold across processes).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("max_attempts", sa.Integer(), nullable=False, server_default="3")
        )
    with op.batch_alter_table("agent_profiles") as batch:
        batch.add_column(
            sa.Column("claimed_runs", sa.Integer(), nullable=False, server_default="0")
        )
    # The claim reads queued runs in (requested_at, id) order and stops at the first eligible
    # one: with id in the index, ties on requested_at need no sort of the whole queue.
    op.drop_index("ix_runs_status_requested", table_name="runs")
    op.create_index("ix_runs_queue", "runs", ["status", "requested_at", "id"])
    op.execute(
        "UPDATE agent_profiles SET claimed_runs = (SELECT count(*) FROM runs "
        "WHERE runs.agent_profile_id = agent_profiles.id AND runs.status = 'claimed')"
    )


def downgrade() -> None:
    op.drop_index("ix_runs_queue", table_name="runs")
    op.create_index("ix_runs_status_requested", "runs", ["status", "requested_at"])
    with op.batch_alter_table("agent_profiles") as batch:
        batch.drop_column("claimed_runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("attempts")
        batch.drop_column("max_attempts")
