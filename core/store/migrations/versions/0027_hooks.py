"""Outbound webhooks (issue 42 item 1): `hooks` (an endpoint, its event types, its secret and
its cursor in the event log) and `hook_deliveries` (one row per event a hook takes, its
attempts, its claim and lease).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hooks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("events", sa.Text, nullable=False, server_default="[]"),
        sa.Column("secret", sa.Text, nullable=True),
        sa.Column("cursor", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "hook_deliveries",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("hook_id", sa.String(64), nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("state", sa.String(20), nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("next_at", sa.String(40), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("delivered_at", sa.String(40), nullable=True),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.String(40), nullable=True),
        sa.UniqueConstraint("hook_id", "event_id", name="uq_hook_deliveries_event"),
    )
    op.create_index("ix_hook_deliveries_queue", "hook_deliveries", ["hook_id", "state", "event_id"])


def downgrade() -> None:
    op.drop_index("ix_hook_deliveries_queue", table_name="hook_deliveries")
    op.drop_table("hook_deliveries")
    op.drop_table("hooks")
