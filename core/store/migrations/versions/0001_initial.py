"""Initial schema: board, agents, participants and decisions, runs, the entry ledger.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_epochs",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=200), nullable=False),
        sa.Column("opened_at", sa.String(length=40), nullable=False),
        sa.Column("closed_at", sa.String(length=40), nullable=True),
        sa.PrimaryKeyConstraint("epoch"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("agent_profile_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=True),
        sa.Column("workflow_step_id", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.String(length=100), nullable=False),
        sa.Column("payload", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=400), nullable=True),
        sa.Column("coalesce_exempt", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("status", sa.String(length=20), server_default="queued", nullable=False),
        sa.Column("coalesced_count", sa.Integer(), server_default="1", nullable=False),
        sa.Column("requested_at", sa.String(length=40), nullable=False),
        sa.Column("claimed_at", sa.String(length=40), nullable=True),
        sa.Column("claimed_epoch", sa.String(length=64), nullable=True),
        sa.Column("finished_at", sa.String(length=40), nullable=True),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_runs_idempotency_key", "runs", ["idempotency_key"], unique=False)
    op.create_index("ix_runs_status_requested", "runs", ["status", "requested_at"], unique=False)
    op.create_index("ix_runs_task", "runs", ["task_id"], unique=False)
    op.create_table(
        "workspaces",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("office_workflow_id", sa.String(length=64), nullable=True),
        sa.Column("is_default", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "agent_profiles",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("command", sa.Text(), server_default="[]", nullable=False),
        sa.Column("role", sa.String(length=40), server_default="worker", nullable=False),
        sa.Column("env", sa.Text(), server_default="{}", nullable=False),
        sa.Column("requires_env", sa.Text(), server_default="[]", nullable=False),
        sa.Column("max_concurrent_sessions", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("workspace_id", "name", name="uq_agent_profiles_name"),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("workflow_id", sa.String(length=64), nullable=True),
        sa.Column("workflow_step_id", sa.String(length=64), nullable=True),
        sa.Column("title", sa.String(length=500), nullable=False),
        sa.Column("description", sa.Text(), server_default="", nullable=False),
        sa.Column("state", sa.String(length=40), server_default="TODO", nullable=False),
        sa.Column("priority", sa.String(length=20), server_default="none", nullable=False),
        sa.Column("position", sa.Integer(), server_default="0", nullable=False),
        sa.Column("wip_admitted", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("queued_for_step_id", sa.String(length=64), nullable=True),
        sa.Column("queued_at", sa.String(length=40), nullable=True),
        sa.Column("project_id", sa.String(length=64), nullable=True),
        sa.Column("is_ephemeral", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("archived_at", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.Column("updated_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_tasks_queued_for", "tasks", ["queued_for_step_id"], unique=False)
    op.create_index("ix_tasks_step", "tasks", ["workflow_step_id", "wip_admitted"], unique=False)
    op.create_table(
        "workflows",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), server_default="", nullable=False),
        sa.Column("prompt", sa.Text(), server_default="", nullable=False),
        sa.Column("agent_profile_id", sa.String(length=64), nullable=True),
        sa.Column("hidden", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("template_id", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "session_step_history",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("from_step_id", sa.String(length=64), nullable=True),
        sa.Column("to_step_id", sa.String(length=64), nullable=True),
        sa.Column("trigger", sa.String(length=60), nullable=False),
        sa.Column("actor_id", sa.String(length=64), server_default="", nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_session_step_history_task", "session_step_history", ["task_id"], unique=False
    )
    op.create_table(
        "step_entries",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=64), nullable=False),
        sa.Column("entry_seq", sa.Integer(), nullable=False),
        sa.Column("entry_path", sa.String(length=4), nullable=False),
        sa.Column("declaration_digest", sa.String(length=64), nullable=False),
        sa.Column("terminal", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "step_id", "entry_seq", name="uq_step_entries_seq"),
    )
    op.create_index(
        "ix_step_entries_pending",
        "step_entries",
        ["terminal", "task_id", "step_id", "entry_seq"],
        unique=False,
    )
    op.create_table(
        "task_review_runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("workflow_step_id", sa.String(length=64), nullable=False),
        sa.Column("trigger", sa.String(length=40), server_default="workflow_step", nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "task_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("agent_profile_id", sa.String(length=64), nullable=True),
        sa.Column("state", sa.String(length=40), server_default="CREATED", nullable=False),
        sa.Column("is_primary", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("external", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("metadata", sa.Text(), server_default="{}", nullable=False),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("started_at", sa.String(length=40), nullable=True),
        sa.Column("completed_at", sa.String(length=40), nullable=True),
        sa.Column("updated_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_task_sessions_task", "task_sessions", ["task_id"], unique=False)
    op.create_table(
        "workflow_step_decisions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=64), nullable=False),
        sa.Column("participant_id", sa.String(length=64), nullable=False),
        sa.Column("decision", sa.String(length=40), nullable=False),
        sa.Column("comment", sa.Text(), server_default="", nullable=False),
        sa.Column("decided_at", sa.String(length=40), nullable=False),
        sa.Column("superseded_at", sa.String(length=40), nullable=True),
        sa.Column("decider_type", sa.String(length=20), server_default="agent", nullable=False),
        sa.Column("decider_id", sa.String(length=64), server_default="", nullable=False),
        sa.Column("role", sa.String(length=40), server_default="", nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_decisions_task_step", "workflow_step_decisions", ["task_id", "step_id"], unique=False
    )
    op.create_table(
        "workflow_steps",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workflow_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("is_start_step", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("allow_manual_move", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("wip_limit", sa.Integer(), server_default="0", nullable=False),
        sa.Column("pull_from_step_id", sa.String(length=64), nullable=True),
        sa.Column("agent_profile_id", sa.String(length=64), nullable=True),
        sa.Column("prompt", sa.Text(), server_default="", nullable=False),
        sa.Column("stage_type", sa.String(length=20), server_default="custom", nullable=False),
        sa.Column("color", sa.String(length=60), server_default="", nullable=False),
        sa.Column("show_in_command_panel", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("auto_archive_after_hours", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "auto_advance_requires_signal",
            sa.Boolean(),
            server_default=sa.false(),
            nullable=False,
        ),
        sa.Column(
            "cancel_triggers_turn_complete",
            sa.Boolean(),
            server_default=sa.false(),
            nullable=False,
        ),
        sa.Column("events", sa.Text(), server_default="{}", nullable=False),
        sa.ForeignKeyConstraint(["workflow_id"], ["workflows.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("workflow_id", "position", name="uq_workflow_steps_position"),
    )
    op.create_table(
        "step_entry_markers",
        sa.Column("entry_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=100), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("epoch", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.String(length=40), nullable=True),
        sa.Column("cause", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["entry_id"], ["step_entries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("entry_id", "position", "kind"),
    )
    op.create_table(
        "workflow_step_participants",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), server_default="", nullable=False),
        sa.Column("role", sa.String(length=40), nullable=False),
        sa.Column("agent_profile_id", sa.String(length=64), nullable=False),
        sa.Column("decision_required", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("position", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["step_id"], ["workflow_steps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_participants_step_task",
        "workflow_step_participants",
        ["step_id", "task_id"],
        unique=False,
    )
    op.create_index("ix_participants_task", "workflow_step_participants", ["task_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_participants_task", table_name="workflow_step_participants")
    op.drop_index("ix_participants_step_task", table_name="workflow_step_participants")
    op.drop_table("workflow_step_participants")
    op.drop_table("step_entry_markers")
    op.drop_table("workflow_steps")
    op.drop_index("ix_decisions_task_step", table_name="workflow_step_decisions")
    op.drop_table("workflow_step_decisions")
    op.drop_index("ix_task_sessions_task", table_name="task_sessions")
    op.drop_table("task_sessions")
    op.drop_table("task_review_runs")
    op.drop_index("ix_step_entries_pending", table_name="step_entries")
    op.drop_table("step_entries")
    op.drop_index("ix_session_step_history_task", table_name="session_step_history")
    op.drop_table("session_step_history")
    op.drop_table("workflows")
    op.drop_index("ix_tasks_step", table_name="tasks")
    op.drop_index("ix_tasks_queued_for", table_name="tasks")
    op.drop_table("tasks")
    op.drop_table("agent_profiles")
    op.drop_table("workspaces")
    op.drop_index("ix_runs_task", table_name="runs")
    op.drop_index("ix_runs_status_requested", table_name="runs")
    op.drop_index("ix_runs_idempotency_key", table_name="runs")
    op.drop_table("runs")
    op.drop_table("host_epochs")
