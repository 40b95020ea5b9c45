"""A run retried once (issue 38 item 6) and the runaway-loop limit over trigger-driven runs
(issue 38 item 2).

- `runs.retried_by`: the run a `runs retry` queued after this one. Set by one conditional
  UPDATE (`WHERE retried_by IS NULL`), whose row count decides which of two racing retries
  queues the new attempt. Runs retried before this revision get their first retry's id.
- `task_step_arrivals.wakes`: the runs the task's triggers queued at the step, without a move,
  within the row's loop generation (the count the runaway-loop limit holds against
  `max_step_arrivals`, as `arrivals` is for moves).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("retried_by", sa.String(length=64), nullable=True))
    with op.batch_alter_table("task_step_arrivals") as batch:
        batch.add_column(sa.Column("wakes", sa.Integer(), nullable=False, server_default="0"))
    op.execute(
        "UPDATE runs SET retried_by = (SELECT min(r.id) FROM runs r WHERE r.retry_of = runs.id) "
        "WHERE EXISTS (SELECT 1 FROM runs r WHERE r.retry_of = runs.id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("task_step_arrivals") as batch:
        batch.drop_column("wakes")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("retried_by")
