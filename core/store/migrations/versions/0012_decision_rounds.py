"""Review rounds kept: `workflow_step_decisions.cleared_at`.

clear_decisions used to DELETE the step's verdicts on a new entry, so a reviewer's reasons
were gone from the board once the task came back for review. It now stamps them cleared (one
UPDATE over the pair, the same linearization point the DELETE was): `decision list` and the
quorum read only the rows with no stamp, `decision list --all` reads every round.

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflow_step_decisions") as batch:
        batch.add_column(sa.Column("cleared_at", sa.String(length=40), nullable=True))


def downgrade() -> None:
    # The earlier rounds had been deleted under the old schema: drop them again so a
    # downgraded quorum does not count them.
    op.execute("DELETE FROM workflow_step_decisions WHERE cleared_at IS NOT NULL")
    with op.batch_alter_table("workflow_step_decisions") as batch:
        batch.drop_column("cleared_at")
