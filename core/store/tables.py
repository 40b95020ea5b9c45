"""The schema, as SQLAlchemy Core tables.

Table names the specs use (`tasks`, `workflow_steps`, `step_entries`, ...) are public: tooling
outside laneway reads them. Timestamps are ISO-8601 UTC strings (sortable, identical on SQLite
and PostgreSQL); JSON-bearing columns are TEXT written by the repositories, so every dialect
stores the same bytes and key order is kept.

This module is the *current* shape. The database is built by the alembic migrations in
`core/store/migrations`; a test proves `upgrade head` produces exactly this metadata.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

import sqlalchemy as sa

_metadata = sa.MetaData()

# Each table is built the first time a process names it (`tables.tasks`, module `__getattr__`
# below): a one-shot command uses a third of them, and building all 31 (293 columns) was 9 ms
# of `laneway task move` (issue 45 item 6). `metadata` builds every table that is not built
# yet, so whatever reads the whole schema (the migrations' comparison, `create_all`) sees all.
# Each name is declared here for the type checker, not assigned: the first access goes to
# `__getattr__`, which builds the table and binds the name, so later ones are plain lookups.
metadata: sa.MetaData
workspaces: sa.Table
agent_profiles: sa.Table
workflows: sa.Table
workflow_steps: sa.Table
tasks: sa.Table
task_blockers: sa.Table
task_sessions: sa.Table
transcript_items: sa.Table
session_step_history: sa.Table
workflow_step_participants: sa.Table
workflow_step_decisions: sa.Table
comments: sa.Table
permissions: sa.Table
questions: sa.Table
runs: sa.Table
task_review_runs: sa.Table
step_entries: sa.Table
step_entry_markers: sa.Table
task_step_arrivals: sa.Table
host_epochs: sa.Table
board_events: sa.Table
board_settings: sa.Table
applied_operations: sa.Table
trigger_outbox: sa.Table
budgets: sa.Table
budget_alerts: sa.Table
hooks: sa.Table
hook_deliveries: sa.Table
schedules: sa.Table
person_waits: sa.Table
users: sa.Table

CASCADE = "CASCADE"


def _workspaces() -> sa.Table:
    return sa.Table(
        "workspaces",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("office_workflow_id", sa.String(64), nullable=True),
        sa.Column("is_default", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


def _agent_profiles() -> sa.Table:
    return sa.Table(
        "agent_profiles",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "workspace_id",
            sa.String(64),
            sa.ForeignKey("workspaces.id", ondelete=CASCADE),
            nullable=False,
        ),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("command", sa.Text, nullable=False, server_default="[]"),
        sa.Column("role", sa.String(40), nullable=False, server_default="worker"),
        sa.Column("env", sa.Text, nullable=False, server_default="{}"),
        sa.Column("requires_env", sa.Text, nullable=False, server_default="[]"),
        sa.Column("max_concurrent_sessions", sa.Integer, nullable=False, server_default="1"),
        # How many of this agent's runs are claimed now: the row a claim locks and bumps, so the
        # limit above holds across worker processes (see core.runs).
        sa.Column("claimed_runs", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("env_from", sa.Text, nullable=False, server_default="{}"),
        sa.Column("pass_env", sa.Text, nullable=False, server_default="[]"),
        # How laneway talks to the agent (AGENTS.md): exec (a process per turn) or acp.
        sa.Column("protocol", sa.String(20), nullable=False, server_default="exec"),
        sa.Column("permissions", sa.String(20), nullable=False, server_default="ask"),
        sa.Column("auto_allow", sa.Text, nullable=False, server_default="[]"),
        sa.Column("turn_timeout", sa.Float, nullable=False, server_default="3600"),
        sa.Column("idle_timeout", sa.Float, nullable=False, server_default="900"),
        sa.Column("mode", sa.String(200), nullable=True),
        # the agent's room (AGENTS.md `--sandbox`): none, or bwrap; its network under it, on or off
        sa.Column("sandbox", sa.String(20), nullable=False, server_default="none"),
        sa.Column("network", sa.String(10), nullable=False, server_default="on"),
        sa.UniqueConstraint("workspace_id", "name", name="uq_agent_profiles_name"),
    )


def _workflows() -> sa.Table:
    return sa.Table(
        "workflows",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "workspace_id",
            sa.String(64),
            sa.ForeignKey("workspaces.id", ondelete=CASCADE),
            nullable=False,
        ),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("prompt", sa.Text, nullable=False, server_default=""),
        sa.Column("agent_profile_id", sa.String(64), nullable=True),
        sa.Column("hidden", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("template_id", sa.String(100), nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        # the runaway-loop limit: arrivals at one step a trigger may cause (0: no limit)
        sa.Column("max_step_arrivals", sa.Integer, nullable=False, server_default="25"),
        # where its tasks' agents work: a git worktree of this repository, from this branch
        sa.Column("repository", sa.String(4000), nullable=True),
        sa.Column("base_branch", sa.String(255), nullable=True),
        # a task arriving at the terminal step has its worktree retired (as archiving does)
        sa.Column("retire_worktrees", sa.Boolean, nullable=False, server_default=sa.false()),
        # the git remote (a name or URL) its tasks' branches are pushed to
        sa.Column("remote", sa.String(4000), nullable=True),
        # the forge its pull requests are opened on: JSON kind, repo, url, token_env
        sa.Column("forge", sa.Text, nullable=True),
        # shell commands run in a task's worktree: once it is new (before its first turn), and
        # before it is removed
        sa.Column("setup", sa.Text, nullable=True),
        sa.Column("cleanup", sa.Text, nullable=True),
    )


def _workflow_steps() -> sa.Table:
    return sa.Table(
        "workflow_steps",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "workflow_id",
            sa.String(64),
            sa.ForeignKey("workflows.id", ondelete=CASCADE),
            nullable=False,
        ),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("is_start_step", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("allow_manual_move", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("wip_limit", sa.Integer, nullable=False, server_default="0"),
        sa.Column("pull_from_step_id", sa.String(64), nullable=True),
        sa.Column("agent_profile_id", sa.String(64), nullable=True),
        sa.Column("prompt", sa.Text, nullable=False, server_default=""),
        sa.Column("stage_type", sa.String(20), nullable=False, server_default="custom"),
        sa.Column("color", sa.String(60), nullable=False, server_default=""),
        sa.Column("show_in_command_panel", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("auto_archive_after_hours", sa.Integer, nullable=False, server_default="0"),
        sa.Column(
            "auto_advance_requires_signal", sa.Boolean, nullable=False, server_default=sa.false()
        ),
        sa.Column(
            "cancel_triggers_turn_complete", sa.Boolean, nullable=False, server_default=sa.false()
        ),
        sa.Column("events", sa.Text, nullable=False, server_default="{}"),
        # on_heartbeat once per slot of this many seconds for each task at the step (None: never)
        sa.Column("heartbeat_seconds", sa.Integer, nullable=True),
        sa.UniqueConstraint("workflow_id", "position", name="uq_workflow_steps_position"),
    )


def _tasks() -> sa.Table:
    return sa.Table(
        "tasks",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "workspace_id",
            sa.String(64),
            sa.ForeignKey("workspaces.id", ondelete=CASCADE),
            nullable=False,
        ),
        sa.Column("workflow_id", sa.String(64), nullable=True),
        sa.Column("workflow_step_id", sa.String(64), nullable=True),
        sa.Column("title", sa.String(500), nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("state", sa.String(40), nullable=False, server_default="TODO"),
        sa.Column("priority", sa.String(20), nullable=False, server_default="none"),
        sa.Column("position", sa.Integer, nullable=False, server_default="0"),
        sa.Column("wip_admitted", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("queued_for_step_id", sa.String(64), nullable=True),
        sa.Column("queued_at", sa.String(40), nullable=True),
        sa.Column("project_id", sa.String(64), nullable=True),
        sa.Column("is_ephemeral", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("archived_at", sa.String(40), nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
        # set when the runaway-loop limit stopped the task at this step; a person's move clears it
        sa.Column("loop_halted_step_id", sa.String(64), nullable=True),
        # bumped by a person's move: arrival counts of an older generation no longer count
        sa.Column("loop_generation", sa.Integer, nullable=False, server_default="0"),
        # a repository for this task alone (over its workflow's), and its worktree once made (JSON)
        sa.Column("repository", sa.String(4000), nullable=True),
        sa.Column("base_branch", sa.String(255), nullable=True),
        sa.Column("workspace", sa.Text, nullable=True),
        # the task this one is a subtask of (`task create --parent`); cleared when it is deleted
        sa.Column("parent_id", sa.String(64), nullable=True),
        # the ids of the tasks blocking this one (JSON list), kept with `task_blockers` in the
        # same transaction so that every read of a task carries it without a join
        sa.Column("blocked_by", sa.Text, nullable=True),
        sa.Index("ix_tasks_step", "workflow_step_id", "wip_admitted"),
        sa.Index("ix_tasks_queued_for", "queued_for_step_id"),
        sa.Index("ix_tasks_parent", "parent_id"),
        # the board's pages, oldest first from a cursor, per workflow and per lane (0018)
        sa.Index("ix_tasks_workflow_created", "workflow_id", "created_at", "id"),
        sa.Index("ix_tasks_step_created", "workflow_step_id", "created_at", "id"),
    )


# B blocks T (`task block T --by B`): the relation the on_blocker_resolved trigger reads, by
# the blocker (which tasks does the one that just finished block?).
def _task_blockers() -> sa.Table:
    return sa.Table(
        "task_blockers",
        _metadata,
        sa.Column(
            "task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete=CASCADE), primary_key=True
        ),
        sa.Column(
            "blocker_id",
            sa.String(64),
            sa.ForeignKey("tasks.id", ondelete=CASCADE),
            primary_key=True,
        ),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Index("ix_task_blockers_blocker", "blocker_id"),
    )


def _task_sessions() -> sa.Table:
    return sa.Table(
        "task_sessions",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete=CASCADE), nullable=False
        ),
        sa.Column("agent_profile_id", sa.String(64), nullable=True),
        sa.Column("state", sa.String(40), nullable=False, server_default="CREATED"),
        sa.Column("is_primary", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("external", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("metadata", sa.Text, nullable=False, server_default="{}"),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("started_at", sa.String(40), nullable=True),
        sa.Column("completed_at", sa.String(40), nullable=True),
        sa.Column("updated_at", sa.String(40), nullable=False),
        # What the agent reported of its conversation (ACP session id, modes, options in force);
        # `metadata` holds what the workflow wants of it.
        sa.Column("agent", sa.Text, nullable=False, server_default="{}"),
        sa.Index("ix_task_sessions_task", "task_id"),
    )


# A session's transcript, item by item (AGENTS.md "What the board sees"). `seq` is numbered
# per session by the inserting statement itself, under the session row's lock.
def _transcript_items() -> sa.Table:
    return sa.Table(
        "transcript_items",
        _metadata,
        sa.Column(
            "session_id",
            sa.String(64),
            sa.ForeignKey("task_sessions.id", ondelete=CASCADE),
            primary_key=True,
        ),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("text", sa.Text, nullable=False, server_default=""),
        sa.Column("data", sa.Text, nullable=False, server_default="{}"),
        sa.Column("at", sa.String(40), nullable=False),
        sa.Index("ix_transcript_items_run", "run_id"),
    )


def _session_step_history() -> sa.Table:
    return sa.Table(
        "session_step_history",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column(
            "task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete=CASCADE), nullable=False
        ),
        sa.Column("from_step_id", sa.String(64), nullable=True),
        sa.Column("to_step_id", sa.String(64), nullable=True),
        sa.Column("trigger", sa.String(60), nullable=False),
        sa.Column("actor_id", sa.String(64), nullable=False, server_default=""),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Index("ix_session_step_history_task", "task_id"),
    )


def _workflow_step_participants() -> sa.Table:
    return sa.Table(
        "workflow_step_participants",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "step_id",
            sa.String(64),
            sa.ForeignKey("workflow_steps.id", ondelete=CASCADE),
            nullable=False,
        ),
        sa.Column("task_id", sa.String(64), nullable=False, server_default=""),
        sa.Column("role", sa.String(40), nullable=False),
        sa.Column("agent_profile_id", sa.String(64), nullable=False),
        sa.Column("decision_required", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("position", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Index("ix_participants_step_task", "step_id", "task_id"),
        sa.Index("ix_participants_task", "task_id"),
    )


def _workflow_step_decisions() -> sa.Table:
    return sa.Table(
        "workflow_step_decisions",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete=CASCADE), nullable=False
        ),
        sa.Column("step_id", sa.String(64), nullable=False),
        sa.Column("participant_id", sa.String(64), nullable=False),
        sa.Column("decision", sa.String(40), nullable=False),
        sa.Column("comment", sa.Text, nullable=False, server_default=""),
        sa.Column("decided_at", sa.String(40), nullable=False),
        sa.Column("superseded_at", sa.String(40), nullable=True),
        sa.Column("decider_type", sa.String(20), nullable=False, server_default="agent"),
        sa.Column("decider_id", sa.String(64), nullable=False, server_default=""),
        sa.Column("role", sa.String(40), nullable=False, server_default=""),
        sa.Column("run_id", sa.String(64), nullable=True),
        # Set by clear_decisions on a new entry: the row belongs to an earlier review round, kept
        # readable (`decision list --all`) but no longer counted by the quorum.
        sa.Column("cleared_at", sa.String(40), nullable=True),
        sa.Column("actor", sa.String(200), nullable=False, server_default="system"),
        sa.Index("ix_decisions_task_step", "task_id", "step_id"),
        # A re-run of one run (its worker died after the verdict) adds nothing: NULLs are
        # distinct on both databases, so decisions recorded outside a run are not limited.
        sa.Index("uq_decisions_run_participant", "run_id", "participant_id", unique=True),
    )


# A task's comments (CLI.md `task comment`); each fires on_comment at the task's step with the
# operation id `task_comment:<id>`. They go with their task (the foreign key's cascade).
def _comments() -> sa.Table:
    return sa.Table(
        "comments",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete=CASCADE), nullable=False
        ),
        sa.Column("author", sa.String(200), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        # a comment on a line of the task's diff: the file's path and the line's number
        sa.Column("file", sa.String(4000), nullable=True),
        sa.Column("line", sa.Integer, nullable=True),
        # who wrote it (core.actors): `user:<name>`, `agent:<profile>` or `system`
        sa.Column("actor", sa.String(200), nullable=False, server_default="system"),
        sa.Index("ix_comments_task", "task_id", "created_at"),
    )


# ACP agents' permission requests a person answers (`--permissions ask`, CLI.md `permission`).
# `state` leaves `pending` once, by a conditional UPDATE. They go with their task (the foreign
# key's cascade); `run_id` is what a run ending, or re-queued from a dead worker, cancels by.
def _permissions() -> sa.Table:
    return sa.Table(
        "permissions",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete=CASCADE), nullable=False
        ),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("tool_call", sa.Text, nullable=False, server_default="{}"),
        sa.Column("options", sa.Text, nullable=False, server_default="[]"),
        sa.Column("state", sa.String(20), nullable=False, server_default="pending"),
        sa.Column("option_id", sa.String(200), nullable=True),
        sa.Column("decided_by", sa.String(200), nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("decided_at", sa.String(40), nullable=True),
        # who answered it (core.actors); `decided_by` is the free text the answer gave
        sa.Column("actor", sa.String(200), nullable=False, server_default="system"),
        sa.Index("ix_permissions_task", "task_id", "created_at"),
        sa.Index("ix_permissions_run", "run_id", "state"),
    )


# Questions an agent asks a person (AGENTS.md `ask`, ACP `elicitation/create`; CLI.md
# `question`). As permissions: `state` leaves `pending` once, by a conditional UPDATE; `run_id`
# is what a run ending, or re-queued from a dead worker, cancels by. `fields` is the form (JSON
# `[{"name", "type", "title", "required", "choices"}]`), `answer` the JSON object given.
def _questions() -> sa.Table:
    return sa.Table(
        "questions",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete=CASCADE), nullable=False
        ),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("message", sa.Text, nullable=False, server_default=""),
        sa.Column("fields", sa.Text, nullable=False, server_default="[]"),
        sa.Column("state", sa.String(20), nullable=False, server_default="pending"),
        sa.Column("answer", sa.Text, nullable=True),
        sa.Column("answered_by", sa.String(200), nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("answered_at", sa.String(40), nullable=True),
        sa.Index("ix_questions_task", "task_id", "created_at"),
        sa.Index("ix_questions_run", "run_id", "state"),
    )


CLAIMED_SESSION_INDEX = "uq_runs_claimed_session"
"""The index that keeps a session's runs one at a time (`_runs`; migration 0034)."""


def _runs() -> sa.Table:
    return sa.Table(
        "runs",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("agent_profile_id", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(64), nullable=True),
        sa.Column("workflow_step_id", sa.String(64), nullable=True),
        sa.Column("reason", sa.String(100), nullable=False),
        sa.Column("payload", sa.Text, nullable=True),
        sa.Column("idempotency_key", sa.String(400), nullable=True),
        sa.Column("coalesce_exempt", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("status", sa.String(20), nullable=False, server_default="queued"),
        sa.Column("coalesced_count", sa.Integer, nullable=False, server_default="1"),
        sa.Column("requested_at", sa.String(40), nullable=False),
        sa.Column("claimed_at", sa.String(40), nullable=True),
        sa.Column("claimed_epoch", sa.String(64), nullable=True),
        sa.Column("finished_at", sa.String(40), nullable=True),
        sa.Column("session_id", sa.String(64), nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
        # {"cost_usd", "input_tokens", "output_tokens"} the agent reported over the run
        sa.Column("usage", sa.Text, nullable=True),
        # Why the run was cancelled; on a claimed run, the request its worker acts on
        # (core.agents.worker)
        sa.Column("cancel_reason", sa.String(40), nullable=True),
        # The run a `runs retry` queued this one after (a new attempt is a new row)
        sa.Column("retry_of", sa.String(64), nullable=True),
        # The run a `runs retry` queued after this one: set once, by a conditional UPDATE
        sa.Column("retried_by", sa.String(64), nullable=True),
        # The step entry whose on_enter action queued the run: once that entry is no longer its
        # task's current entry of the step, the run is superseded (core.runs, migration 0017)
        sa.Column("entry_id", sa.String(64), nullable=True),
        # The claim's order (core.runs): read in index order, it stops at the first eligible run.
        sa.Index("ix_runs_queue", "status", "requested_at", "id"),
        sa.Index("ix_runs_idempotency_key", "idempotency_key"),
        # A task's runs; with its agent and claim time, the agent's last turn start (the
        # feedback cursor, core.agents.feedback) is the index's last entry, not a scan
        sa.Index("ix_runs_task_agent_claimed", "task_id", "agent_profile_id", "claimed_at"),
        # One claimed run per session, a session being a task's agent (core.runs: the claim
        # passes over a run whose session is busy; this decides when two claims race). Partial
        # (`WHERE status = 'claimed'`), as migration 0034 makes it; the predicate is not
        # repeated here: `sqlite_where` and `postgresql_where` made every process import both
        # dialects to validate them (30 ms of a SQLite worker's start, issue 45 item 6).
        # tests/agents/test_session_runs_one_at_a_time.py holds it.
        sa.Index(CLAIMED_SESSION_INDEX, "task_id", "agent_profile_id", unique=True),
    )


def _task_review_runs() -> sa.Table:
    return sa.Table(
        "task_review_runs",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete=CASCADE), nullable=False
        ),
        sa.Column("workflow_step_id", sa.String(64), nullable=False),
        sa.Column("trigger", sa.String(40), nullable=False, server_default="workflow_step"),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


def _step_entries() -> sa.Table:
    table = sa.Table(
        "step_entries",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete=CASCADE), nullable=False
        ),
        sa.Column("step_id", sa.String(64), nullable=False),
        sa.Column("entry_seq", sa.Integer, nullable=False),
        sa.Column("entry_path", sa.String(4), nullable=False),
        sa.Column("declaration_digest", sa.String(64), nullable=False),
        sa.Column("terminal", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.String(40), nullable=False),
        # The epoch of the process dispatching the entry: the recovery scan resumes it only once
        # that epoch is dead (NULL, from before migration 0017: dead)
        sa.Column("epoch", sa.String(64), nullable=True),
        sa.UniqueConstraint("task_id", "step_id", "entry_seq", name="uq_step_entries_seq"),
    )
    # Recovery asks "non-terminal entries in (task, step, seq) order": one range scan.
    # Partial (migration 0007, issue 14): it holds only the pending entries, a handful on a
    # healthy board, so an arrival's insert and its terminal flag touch one small page instead
    # of two leaves of an index over every entry ever made. A query reads it only when its
    # WHERE says exactly `terminal IS false` (`terminal.is_(False)`; SQLite renders
    # `terminal IS 0`); `IS NOT true` keeps a query off it. The predicate is the migration's,
    # not repeated here: `sqlite_where` and `postgresql_where` made every process import both
    # dialects to validate them (the reason board_events gives for AUTOINCREMENT);
    # tests/store/test_store_arrival_pages.py holds it.
    sa.Index(
        "ix_step_entries_pending",
        table.c.task_id,
        table.c.step_id,
        table.c.entry_seq,
    )
    return table


# On SQLite a WITHOUT ROWID table (migration 0007, issue 14: its rows live in the primary-key
# b-tree, one b-tree written per marker instead of two); not declared here, for the reason
# board_events gives for AUTOINCREMENT.
def _step_entry_markers() -> sa.Table:
    return sa.Table(
        "step_entry_markers",
        _metadata,
        sa.Column(
            "entry_id",
            sa.String(64),
            sa.ForeignKey("step_entries.id", ondelete=CASCADE),
            primary_key=True,
        ),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(100), primary_key=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("epoch", sa.String(64), nullable=True),
        sa.Column("reason", sa.String(40), nullable=True),
        sa.Column("cause", sa.Text, nullable=True),
        sa.Column("updated_at", sa.String(40), nullable=False),
    )


def _task_step_arrivals() -> sa.Table:
    return sa.Table(
        "task_step_arrivals",
        _metadata,
        sa.Column(
            "task_id",
            sa.String(64),
            sa.ForeignKey("tasks.id", ondelete=CASCADE),
            primary_key=True,
        ),
        sa.Column("step_id", sa.String(64), primary_key=True),
        # trigger-driven admissions at the step within the task's loop_generation `generation`
        sa.Column("arrivals", sa.Integer, nullable=False, server_default="0"),
        sa.Column("generation", sa.Integer, nullable=False, server_default="0"),
        # runs the task's triggers queued at the step without moving it, in the same generation
        sa.Column("wakes", sa.Integer, nullable=False, server_default="0"),
    )


def _host_epochs() -> sa.Table:
    return sa.Table(
        "host_epochs",
        _metadata,
        sa.Column("epoch", sa.String(64), primary_key=True),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("hostname", sa.String(200), nullable=False),
        sa.Column("opened_at", sa.String(40), nullable=False),
        sa.Column("closed_at", sa.String(40), nullable=True),
        # a `worker` process (migration 0030): the scheduler tells a host no worker is alive on
        sa.Column("worker", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Index("ix_host_epochs_host_open", "hostname", "closed_at"),
    )


# The board's event log (an outbox): every change that `laneway serve` streams is written here
# in the same transaction as the change itself, so every process's changes are seen and none is
# lost on a crash. Ids only grow in commit order (core/store/events.py says how).
def _board_events() -> sa.Table:
    return sa.Table(
        "board_events",
        _metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("task_id", sa.String(64), nullable=True),
        sa.Column("at", sa.String(40), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        # who made the change (core.actors): `user:<name>`, `agent:<profile>` or `system`
        sa.Column("actor", sa.String(200), nullable=False, server_default="system"),
        # No index beside the primary key (migration 0007 dropped those on `at` and on
        # (task_id, id), issue 14): every event paid for them, and their readers go along the id
        # instead - pruning from the oldest ids (ids grow with time), a `?task=` stream's
        # catch-up over the events after its Last-Event-ID.
        # SQLite must never hand out an id again after pruning removed the newest: migration 0006
        # creates this table with AUTOINCREMENT. Not repeated here (`sqlite_autoincrement=True`):
        # that keyword made every process import SQLite's dialect to validate it, PostgreSQL's
        # included, and only the migrations create tables.
    )


def _board_settings() -> sa.Table:
    return sa.Table(
        "board_settings",
        _metadata,
        # One row (id 1), written by the migration. `catalogue_version` moves in every transaction
        # that changes what processes cache (workflows, profiles, seats, the features below), so a
        # process compares one integer per transaction instead of re-reading the catalogue.
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("catalogue_version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("features", sa.Text, nullable=False, server_default="{}"),
        sa.Column("updated_at", sa.String(40), nullable=True),
    )


def _applied_operations() -> sa.Table:
    return sa.Table(
        "applied_operations",
        _metadata,
        # on_agent_error operation ids (AC-C5, made durable): the primary key is the decision.
        sa.Column("operation_id", sa.String(400), primary_key=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("epoch", sa.String(64), nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Index("ix_applied_operations_created", "created_at"),
    )


# Triggers whose cause committed and whose dispatch has not yet run (a transactional outbox):
# written in the cause's own transaction (a child's arrival at the terminal step, a budget
# threshold crossed), deleted once the trigger was delivered under its operation id. A crash
# between the two leaves the row, and the next scheduler pass in any process delivers it; the
# operation id's claim makes a second delivery idempotent.
def _trigger_outbox() -> sa.Table:
    return sa.Table(
        "trigger_outbox",
        _metadata,
        sa.Column("operation_id", sa.String(400), primary_key=True),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("trigger", sa.String(40), nullable=False),
        sa.Column("payload", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


# Spending limits (`budget set`): a scope (workspace, profile or task; `ref` its id), a limit
# in USD per period, and the percentages of it at which on_budget_alert fires.
def _budgets() -> sa.Table:
    return sa.Table(
        "budgets",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("workspace_id", sa.String(64), nullable=False),
        sa.Column("scope", sa.String(20), nullable=False),
        sa.Column("ref", sa.String(64), nullable=False),
        sa.Column("limit_usd", sa.Float, nullable=False),
        sa.Column("period", sa.String(20), nullable=False, server_default="total"),
        sa.Column("thresholds", sa.Text, nullable=False, server_default="[80, 100]"),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
        sa.UniqueConstraint("scope", "ref", "period", name="uq_budgets_scope"),
    )


# One row per alert that fired: the primary key is the decision (once per budget, threshold
# and period), kept for good (unlike applied_operations, which is pruned after a week).
def _budget_alerts() -> sa.Table:
    return sa.Table(
        "budget_alerts",
        _metadata,
        sa.Column(
            "budget_id",
            sa.String(64),
            sa.ForeignKey("budgets.id", ondelete=CASCADE),
            primary_key=True,
        ),
        sa.Column("threshold", sa.Integer, primary_key=True),
        sa.Column("period_start", sa.String(40), primary_key=True),
        sa.Column("task_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


# Outbound webhooks (issue 42 item 1, core/services/hooks.py): `cursor` is the last event id
# the hook has taken into `hook_deliveries`; event ids are committed in order, so a cursor
# never skips one. The secret is kept here, readable only by the board's processes.
def _hooks() -> sa.Table:
    return sa.Table(
        "hooks",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("events", sa.Text, nullable=False, server_default="[]"),
        sa.Column("secret", sa.Text, nullable=True),
        sa.Column("cursor", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


# One row per (hook, event): its body as first taken (so pruning the event loses nothing),
# its attempts, and its claim: `claimed_by`/`lease_until` set by a conditional UPDATE, so a
# process killed mid-send leaves a lease that runs out and the row is claimable again.
def _hook_deliveries() -> sa.Table:
    return sa.Table(
        "hook_deliveries",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("hook_id", sa.String(64), nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("state", sa.String(20), nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("next_at", sa.String(40), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("delivered_at", sa.String(40), nullable=True),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.String(40), nullable=True),
        sa.UniqueConstraint("hook_id", "event_id", name="uq_hook_deliveries_event"),
        sa.Index("ix_hook_deliveries_queue", "hook_id", "state", "event_id"),
    )


def column_length(column: sa.Column[Any]) -> int:
    """A string column's declared length: the longest value every database accepts in it."""
    length = getattr(column.type, "length", None)
    assert isinstance(length, int), column
    return length


# Schedules (issue 42 item 4, core/services/schedules.py): a task created once per slot of
# `every_seconds` (the multiples of it since the Unix epoch). `last_slot` is the start of the
# last slot that made its task; raising it by a conditional UPDATE in the task's own
# transaction is what decides which process makes a slot's task.
def _schedules() -> sa.Table:
    return sa.Table(
        "schedules",
        _metadata,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "workflow_id",
            sa.String(64),
            sa.ForeignKey("workflows.id", ondelete=CASCADE),
            nullable=False,
        ),
        sa.Column("step_id", sa.String(64), nullable=True),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("every_seconds", sa.BigInteger, nullable=False),
        sa.Column("last_slot", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


# Why a task waits for a person beyond a pending permission (issue 42 item 2,
# core/store/waits.py): one row per (task, reason) while the wait lasts. Its insert (a
# conditional INSERT whose row count decides) writes `task.needs_person`; its delete writes
# `task.needs_person_ended` with the same `data`, so the two events pair exactly.
def _person_waits() -> sa.Table:
    return sa.Table(
        "person_waits",
        _metadata,
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("reason", sa.String(20), primary_key=True),
        sa.Column("data", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


# People of the board (issue 44, `laneway user`): a name, a role and the sha256 of the
# person's token (the token itself is printed once and never stored). A request's token is
# looked up by its hash, so no comparison runs over names.
def _users() -> sa.Table:
    return sa.Table(
        "users",
        _metadata,
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.UniqueConstraint("token_hash", name="uq_users_token_hash"),
    )


_BUILDERS: Final[dict[str, Callable[[], sa.Table]]] = {
    "workspaces": _workspaces,
    "agent_profiles": _agent_profiles,
    "workflows": _workflows,
    "workflow_steps": _workflow_steps,
    "tasks": _tasks,
    "task_blockers": _task_blockers,
    "task_sessions": _task_sessions,
    "transcript_items": _transcript_items,
    "session_step_history": _session_step_history,
    "workflow_step_participants": _workflow_step_participants,
    "workflow_step_decisions": _workflow_step_decisions,
    "comments": _comments,
    "permissions": _permissions,
    "questions": _questions,
    "runs": _runs,
    "task_review_runs": _task_review_runs,
    "step_entries": _step_entries,
    "step_entry_markers": _step_entry_markers,
    "task_step_arrivals": _task_step_arrivals,
    "host_epochs": _host_epochs,
    "board_events": _board_events,
    "board_settings": _board_settings,
    "applied_operations": _applied_operations,
    "trigger_outbox": _trigger_outbox,
    "budgets": _budgets,
    "budget_alerts": _budget_alerts,
    "hooks": _hooks,
    "hook_deliveries": _hook_deliveries,
    "schedules": _schedules,
    "person_waits": _person_waits,
    "users": _users,
}
"""Every table, in the order the schema declares them."""


_building = threading.RLock()
"""Held while a table is built: two threads naming one table first would otherwise both
build it, and the second `sa.Table` on the same `MetaData` is refused (already defined)."""


def __getattr__(name: str) -> Any:
    if name == "metadata":
        with _building:
            for each in _BUILDERS:
                if each not in globals():
                    __getattr__(each)
            globals()["metadata"] = _metadata
        return _metadata
    builder = _BUILDERS.get(name)
    if builder is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _building:
        table = globals().get(name)
        if table is None:  # not built by a thread that held the lock first
            table = builder()
            globals()[name] = table
    return table
