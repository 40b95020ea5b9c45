"""One claimed run per session: a unique index on a claimed run's (task, agent), the session
its turn runs in (core.runs). Two runs of one session claimed at once ran two turns of one
conversation side by side, each overwriting the other's bookkeeping.

A board upgraded while that happened has runs breaking the index: every such run but the
first claimed goes back to the queue, as a run whose worker died does (its agent's count of
claimed runs kept true). The worker running it finds the claim gone when it ends (its release
is conditional on the claim) and writes nothing; the run's turn is run again, in its turn.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

INDEX = "uq_runs_claimed_session"
CLAIMED = sa.text("status = 'claimed'")


def upgrade() -> None:
    conn = op.get_bind()
    runs = sa.table(
        "runs",
        sa.column("id", sa.String),
        sa.column("task_id", sa.String),
        sa.column("agent_profile_id", sa.String),
        sa.column("status", sa.String),
        sa.column("claimed_at", sa.String),
        sa.column("claimed_epoch", sa.String),
    )
    profiles = sa.table(
        "agent_profiles", sa.column("id", sa.String), sa.column("claimed_runs", sa.Integer)
    )
    earlier = runs.alias("earlier")
    later = conn.execute(
        sa.select(runs.c.id, runs.c.agent_profile_id).where(
            runs.c.status == "claimed",
            sa.exists().where(
                earlier.c.status == "claimed",
                earlier.c.task_id == runs.c.task_id,
                earlier.c.agent_profile_id == runs.c.agent_profile_id,
                sa.tuple_(earlier.c.claimed_at, earlier.c.id)
                < sa.tuple_(runs.c.claimed_at, runs.c.id),
            ),
        )
    ).all()
    for run_id, agent in later:
        conn.execute(
            sa.update(runs)
            .where(runs.c.id == run_id)
            .values(status="queued", claimed_at=None, claimed_epoch=None)
        )
        conn.execute(
            sa.update(profiles)
            .where(profiles.c.id == agent, profiles.c.claimed_runs > 0)
            .values(claimed_runs=profiles.c.claimed_runs - 1)
        )
    op.create_index(
        INDEX,
        "runs",
        ["task_id", "agent_profile_id"],
        unique=True,
        sqlite_where=CLAIMED,
        postgresql_where=CLAIMED,
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="runs")
