"""Rows to values and back. The one place JSON-bearing columns are encoded and decoded."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from core.model import (
    ActionDecl,
    AgentProfile,
    Comment,
    Decision,
    Events,
    Item,
    Marker,
    Participant,
    Permission,
    Question,
    QuestionField,
    Run,
    Session,
    Step,
    StepEntry,
    Task,
    Workflow,
    Workspace,
)
from core.store import prepared
from core.store import tables as t

RowLike = RowMapping | Mapping[str, Any]
"""A row as Core returns it, or as the prepared arrival path does (a plain dict)."""


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def decode_events(raw: Mapping[str, Any] | None) -> Events:
    """The one decoder of a step's declared events, used by file loading and the store alike.

    `raw` maps trigger -> list of `{type, config}`; positions are the list indexes.
    """
    events: dict[str, tuple[ActionDecl, ...]] = {}
    for trigger, actions in (raw or {}).items():
        events[trigger] = tuple(
            ActionDecl(i, str(a.get("type", "")), a.get("config") or {})
            for i, a in enumerate(actions or ())
        )
    return events


def encode_events(events: Events) -> dict[str, list[dict[str, Any]]]:
    return {trigger: [a.as_dict() for a in actions] for trigger, actions in events.items()}


def workspace(row: RowLike) -> Workspace:
    return Workspace(row["id"], row["name"], row["office_workflow_id"])


def profile(row: RowLike) -> AgentProfile:
    return AgentProfile(
        id=row["id"],
        workspace_id=row["workspace_id"],
        name=row["name"],
        command=tuple(json.loads(row["command"])),
        role=row["role"],
        env=json.loads(row["env"]),
        requires_env=tuple(json.loads(row["requires_env"])),
        max_concurrent_sessions=row["max_concurrent_sessions"],
        env_from=json.loads(row["env_from"]),
        pass_env=tuple(json.loads(row["pass_env"])),
        protocol=row["protocol"],
        permissions=row["permissions"],
        auto_allow=tuple(json.loads(row["auto_allow"])),
        turn_timeout=float(row["turn_timeout"]),
        idle_timeout=float(row["idle_timeout"]),
        mode=row["mode"],
        sandbox=row["sandbox"],
        network=row["network"],
    )


STEP_FIELDS = (
    "name",
    "position",
    "is_start_step",
    "allow_manual_move",
    "wip_limit",
    "pull_from_step_id",
    "agent_profile_id",
    "prompt",
    "stage_type",
    "color",
    "show_in_command_panel",
    "auto_archive_after_hours",
    "auto_advance_requires_signal",
    "cancel_triggers_turn_complete",
    "heartbeat_seconds",
)


def step(row: RowLike) -> Step:
    values = {f: row[f] for f in STEP_FIELDS}
    for flag in (
        "is_start_step",
        "allow_manual_move",
        "show_in_command_panel",
        "auto_advance_requires_signal",
        "cancel_triggers_turn_complete",
    ):
        values[flag] = bool(values[flag])
    return Step(
        id=row["id"],
        workflow_id=row["workflow_id"],
        events=decode_events(json.loads(row["events"])),
        **values,
    )


def step_values(s: Step) -> dict[str, Any]:
    values = {f: getattr(s, f) for f in STEP_FIELDS}
    values.update(id=s.id, workflow_id=s.workflow_id, events=dumps(encode_events(s.events)))
    return values


def workflow(row: RowLike, steps: tuple[Step, ...]) -> Workflow:
    return Workflow(
        id=row["id"],
        workspace_id=row["workspace_id"],
        name=row["name"],
        description=row["description"],
        prompt=row["prompt"],
        agent_profile_id=row["agent_profile_id"],
        hidden=bool(row["hidden"]),
        template_id=row["template_id"],
        steps=steps,
        max_step_arrivals=int(row["max_step_arrivals"]),
        repository=row["repository"],
        base_branch=row["base_branch"],
        retire_worktrees=bool(row["retire_worktrees"]),
        remote=row["remote"],
        setup=row["setup"],
        cleanup=row["cleanup"],
        forge=json.loads(row["forge"]) if row["forge"] else None,
    )


TASK_FIELDS = tuple(c.name for c in t.tasks.columns)


def task(row: RowLike) -> Task:
    values = {f: row[f] for f in TASK_FIELDS}
    values["wip_admitted"] = bool(values["wip_admitted"])
    values["is_ephemeral"] = bool(values["is_ephemeral"])
    values["workspace"] = json.loads(values["workspace"]) if values["workspace"] else None
    values["blocked_by"] = tuple(json.loads(values["blocked_by"])) if values["blocked_by"] else ()
    return Task(**values)


def session(row: RowLike) -> Session:
    return Session(
        id=row["id"],
        task_id=row["task_id"],
        agent_profile_id=row["agent_profile_id"],
        state=row["state"],
        is_primary=bool(row["is_primary"]),
        external=bool(row["external"]),
        metadata=json.loads(row["metadata"]),
        error_message=row["error_message"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        updated_at=row["updated_at"],
        agent=json.loads(row["agent"]),
    )


def item(row: RowLike) -> Item:
    return Item(
        seq=int(row["seq"]),
        session_id=row["session_id"],
        run_id=row["run_id"],
        kind=row["kind"],
        text=row["text"],
        data=json.loads(row["data"]),
        at=row["at"],
    )


def participant(row: RowLike) -> Participant:
    return Participant(
        id=row["id"],
        step_id=row["step_id"],
        task_id=row["task_id"],
        role=row["role"],
        agent_profile_id=row["agent_profile_id"],
        decision_required=bool(row["decision_required"]),
        position=row["position"],
    )


def comment(row: RowLike) -> Comment:
    return Comment(**{c.name: row[c.name] for c in t.comments.columns})


def permission(row: RowLike) -> Permission:
    return Permission(
        id=row["id"],
        task_id=row["task_id"],
        session_id=row["session_id"],
        run_id=row["run_id"],
        tool_call=json.loads(row["tool_call"]),
        options=json.loads(row["options"]),
        state=row["state"],
        option_id=row["option_id"],
        decided_by=row["decided_by"],
        created_at=row["created_at"],
        decided_at=row["decided_at"],
        actor=row["actor"],
    )


def question(row: RowLike) -> Question:
    answer = row["answer"]
    return Question(
        id=row["id"],
        task_id=row["task_id"],
        session_id=row["session_id"],
        run_id=row["run_id"],
        message=row["message"],
        fields=[
            QuestionField(
                name=f["name"],
                type=f.get("type", "string"),
                title=f.get("title", ""),
                required=bool(f.get("required", True)),
                choices=tuple(f.get("choices") or ()),
            )
            for f in json.loads(row["fields"])
        ],
        state=row["state"],
        answer=json.loads(answer) if answer is not None else None,
        answered_by=row["answered_by"],
        created_at=row["created_at"],
        answered_at=row["answered_at"],
    )


def decision(row: RowLike, round_no: int = 1) -> Decision:
    """A decision row; its `round` is the caller's to compute (it depends on the other rows)."""
    cols = {c.name: row[c.name] for c in t.workflow_step_decisions.columns}
    return Decision(**cols, round=round_no, cleared=cols["cleared_at"] is not None)


def run(row: RowLike) -> Run:
    payload = row["payload"]
    return Run(
        id=row["id"],
        agent_profile_id=row["agent_profile_id"],
        task_id=row["task_id"],
        workflow_step_id=row["workflow_step_id"],
        reason=row["reason"],
        payload=json.loads(payload) if payload is not None else None,
        idempotency_key=row["idempotency_key"],
        coalesce_exempt=bool(row["coalesce_exempt"]),
        status=row["status"],
        coalesced_count=row["coalesced_count"],
        requested_at=row["requested_at"],
        claimed_at=row["claimed_at"],
        finished_at=row["finished_at"],
        session_id=row["session_id"],
        error_message=row["error_message"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        claimed_epoch=row["claimed_epoch"],
        usage=json.loads(usage) if (usage := row["usage"]) is not None else None,
        cancel_reason=row["cancel_reason"],
        retry_of=row["retry_of"],
        entry_id=row["entry_id"],
    )


def entry(row: RowLike) -> StepEntry:
    return StepEntry(
        id=row["id"],
        task_id=row["task_id"],
        step_id=row["step_id"],
        entry_seq=row["entry_seq"],
        entry_path=row["entry_path"],
        declaration_digest=row["declaration_digest"],
        terminal=bool(row["terminal"]),
        created_at=row["created_at"],
        epoch=row["epoch"],
    )


def marker(row: RowLike) -> Marker:
    return Marker(**{c.name: row[c.name] for c in t.step_entry_markers.columns})


def load_workflow(conn: Connection, workflow_id: str) -> Workflow | None:
    row = (
        conn.execute(sa.select(t.workflows).where(t.workflows.c.id == workflow_id))
        .mappings()
        .first()
    )
    if row is None:
        return None
    steps = tuple(
        step(r)
        for r in conn.execute(
            sa.select(t.workflow_steps)
            .where(t.workflow_steps.c.workflow_id == workflow_id)
            .order_by(t.workflow_steps.c.position)
        ).mappings()
    )
    return workflow(row, steps)


_TASK = sa.select(t.tasks).where(t.tasks.c.id == sa.bindparam("task_id"))


def load_task(conn: Connection, task_id: str) -> Task | None:
    """A task by id: prepared driver SQL (`core.store.prepared`), read on every run's way."""
    row = prepared.execute(conn, _TASK, {"task_id": task_id}).mapping()
    return task(row) if row is not None else None
