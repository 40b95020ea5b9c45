"""A task's runs indexed by (task, agent, claimed_at): the feedback cursor, an agent's last turn
start on its task (`core.agents.feedback`), is read at every run. Through the task's index
alone that read visited every run the task ever had, so a long review loop or a chatty live
conversation made every turn slower than the one before (issue 45: a quarter of a live turn
after 1,000 runs). The new index answers the `max(claimed_at)` from its last entry, and its
first column serves what the task's index served.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_task_agent_claimed", "runs", ["task_id", "agent_profile_id", "claimed_at"]
    )
    op.drop_index("ix_runs_task", table_name="runs")


def downgrade() -> None:
    op.create_index("ix_runs_task", "runs", ["task_id"])
    op.drop_index("ix_runs_task_agent_claimed", table_name="runs")
