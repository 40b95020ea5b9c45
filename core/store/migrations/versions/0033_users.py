"""People of the board and who did what (issue 44): `users` (a name, a role and the sha256 of
the person's token, never the token), and an `actor` column on every event and on the rows a
person writes (comments, verdicts, permission answers).

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

ACTOR_TABLES = ("board_events", "comments", "workflow_step_decisions", "permissions")


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.UniqueConstraint("token_hash", name="uq_users_token_hash"),
    )
    # a plain ADD COLUMN on both databases (SQLite's batch mode would copy board_events and
    # lose its AUTOINCREMENT, migration 0006); a constant default fills the rows there are
    for table in ACTOR_TABLES:
        op.add_column(
            table, sa.Column("actor", sa.String(200), nullable=False, server_default="system")
        )


def downgrade() -> None:
    for table in ACTOR_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("actor")
    op.drop_table("users")
