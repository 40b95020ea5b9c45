"""Runs know the entry that queued them, entries the epoch dispatching them (issue 27).

`runs.entry_id`: the step entry whose on_enter action queued the run (NULL for a run queued by
anything else). A run whose entry is no longer its task's current entry of the step is
superseded: a worker that claims it cancels it (`cancel_reason` `superseded`) without launching
its agent, and one that finishes after being superseded has its outcome refused ("newer
entries win", as for markers).

`step_entries.epoch`: the epoch of the process that allocated the entry and dispatches it. The
recovery scan resumes an entry only when that epoch is dead, so it never races a live process
still running the entry's sequence (NULL: written before this revision, treated as dead).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("entry_id", sa.String(length=64), nullable=True))
    with op.batch_alter_table("step_entries") as batch:
        batch.add_column(sa.Column("epoch", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("step_entries") as batch:
        batch.drop_column("epoch")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("entry_id")
