"""Which host epochs are workers (issue 43 item 1): `host_epochs.worker`, so the scheduler can
tell that no worker on a host a run waits for is alive (`hostname` is the process's host as
`core.hosts` names it: `LANEWAY_HOST` when set).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("host_epochs") as batch:
        batch.add_column(sa.Column("worker", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.create_index("ix_host_epochs_host_open", ["hostname", "closed_at"])


def downgrade() -> None:
    with op.batch_alter_table("host_epochs") as batch:
        batch.drop_index("ix_host_epochs_host_open")
        batch.drop_column("worker")
