"""Runs that are stopped and runs that are tried again (issue 22, "Stop and retry").

`cancel_reason` says why a run was cancelled (`user`, `step_left`, `task_archived`,
`task_deleted`); on a claimed run it is the request its worker acts on (the worker polls the
row while the turn runs). `retry_of` names the run a `runs retry` queued this one after.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("cancel_reason", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("retry_of", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("retry_of")
        batch.drop_column("cancel_reason")
