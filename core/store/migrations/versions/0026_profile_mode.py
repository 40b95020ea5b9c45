"""The ACP mode a profile's conversations start in (issue 41 item 3, AGENTS.md "Phase 4").

- `agent_profiles.mode`: `profile add|set --mode M`; NULL: the agent's own starting mode.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_profiles") as batch:
        batch.add_column(sa.Column("mode", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_profiles") as batch:
        batch.drop_column("mode")
