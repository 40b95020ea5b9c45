"""Value objects: what the store holds and what every layer passes around.

All of them are frozen attrs classes. Mappings inside them (step events, action config, env)
are treated as read-only by convention; nothing in laneway mutates a value after it is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, get_args

import attrs

from core.text import bounded_data, cut_text, stored_text

TRIGGERS: Final = (
    "on_enter",
    "on_exit",
    "on_turn_start",
    "on_turn_complete",
    "on_comment",
    "on_blocker_resolved",
    "on_children_completed",
    "on_approval_resolved",
    "on_heartbeat",
    "on_budget_alert",
    "on_agent_error",
)
"""The eleven triggers a step may declare actions for, in the reference system's order."""

ENTRY_PATHS: Final[frozenset[str]] = frozenset({"E1", "E2", "E3", "E4", "E5"})
"""E1 engine transition, E2 manual move, E3 WIP promotion, E4 switch_workflow, E5 update/start."""

STAGE_TYPES: Final = ("work", "review", "approval", "custom")
PARTICIPANT_ROLES: Final = ("reviewer", "approver", "watcher", "collaborator", "runner")
VERDICTS: Final = ("approved", "rejected", "changes_requested")
TERMINAL_STEP_NAMES: Final = frozenset({"done", "complete", "completed", "approved"})

TASK_STATES: Final = (
    "TODO",
    "CREATED",
    "SCHEDULING",
    "IN_PROGRESS",
    "REVIEW",
    "BLOCKED",
    "WAITING_FOR_INPUT",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
)
SESSION_STATES: Final = (
    "CREATED",
    "STARTING",
    "RUNNING",
    "WAITING_FOR_INPUT",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
)
PROTOCOLS: Final = ("exec", "acp")
"""How laneway talks to a profile's agent (AGENTS.md "Profiles")."""
SANDBOXES: Final = ("none", "bwrap")
"""An agent's room (`profile add|set --sandbox`)."""
NETWORKS: Final = ("on", "off")
PERMISSION_MODES: Final = ("ask", "allow", "deny")
TOOL_KINDS: Final = (
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "other",
)
"""ACP tool kinds a profile's `auto_allow` may list."""
ItemKind = Literal[
    "prompt",
    "message",
    "thought",
    "tool_call",
    "plan",
    "permission",
    "log",
    "output",
    "stderr",
    "usage",
]
"""The kinds of a transcript item (CLI.md; `output` and `stderr` come from exec agents)."""
ITEM_KINDS: Final[tuple[ItemKind, ...]] = get_args(ItemKind)
EVENT_TEXT: Final = 4096
"""The most of an item's text its `agent.item` event carries (`TranscriptItem.event_text`)."""


def _stored_text(text: str) -> str:
    # NUL and lone surrogates cannot be stored on every database: replaced, since a transcript
    # is the agent's output as it came, not input to refuse; then cut to MAX_TEXT
    return cut_text(stored_text(text))


def _stored_data(data: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return bounded_data(data or {})


@attrs.frozen
class TranscriptItem:
    """One transcript item of CLI.md (`kind`, `text`, `data`) in the one shape it keeps from the
    protocol that made it to the session's row, cut to its bounds as it is made, here and
    nowhere else (`core.text.cut_text`: MAX_TEXT characters of text; `bounded_data`: MAX_DATA
    of data as JSON; a larger one is cut and says so), so one chatty agent cannot make a row,
    an event or the worker's memory as large as it likes."""

    kind: ItemKind
    text: str = attrs.field(default="", converter=_stored_text)
    data: Mapping[str, Any] = attrs.field(factory=dict, converter=_stored_data)

    @property
    def event_text(self) -> str:
        """The text its `agent.item` event carries: at most EVENT_TEXT characters of it."""
        return cut_text(self.text, EVENT_TEXT)


ACTIVE_SESSION_STATES: Final = frozenset({"CREATED", "STARTING", "RUNNING", "WAITING_FOR_INPUT"})
WORKING_STATES: Final = frozenset({"STARTING", "RUNNING"})
"""A turn is under way: a message waits for it to end."""
WAITING_STATES: Final = frozenset({"CREATED", "WAITING_FOR_INPUT"})
"""The agent waits for input: a message starts a turn."""

MARKER_STATES: Final = ("in_progress", "done", "skipped", "failed")
SKIP_REASONS: Final = (
    "step_left",
    "superseded",
    "unresolvable",
    "declaration_changed",
    "no_executor",
    "unrecognised",
    "malformed",
)


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return dict(value or {})


DEFAULT_MAX_STEP_ARRIVALS = 25
"""A workflow's runaway-loop limit unless it says otherwise."""


@attrs.frozen
class ActionDecl:
    """One declared action: its 0-based position in the trigger's list, its kind and config."""

    position: int
    kind: str
    config: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, eq=True)

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "config": dict(self.config)}


Events = Mapping[str, tuple[ActionDecl, ...]]


@attrs.frozen
class Workspace:
    id: str
    name: str
    office_workflow_id: str | None = None


@attrs.frozen
class AgentProfile:
    id: str
    workspace_id: str
    name: str
    command: tuple[str, ...] = ()
    role: str = "worker"
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_mapping)
    requires_env: tuple[str, ...] = ()
    max_concurrent_sessions: int = 1
    env_from: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_mapping)
    """Agent variable -> worker variable, read when a turn starts (the value is not stored)."""
    pass_env: tuple[str, ...] = ()
    """Worker variables passed to the agent as they are."""
    protocol: str = "exec"
    """How laneway talks to the agent (AGENTS.md): `exec` (a process per turn) or `acp`."""
    permissions: str = "ask"
    """An ACP agent's permission request: `ask` a person, `allow` or `deny` it at once."""
    auto_allow: tuple[str, ...] = ()
    """ACP tool kinds allowed without asking, whatever `permissions` says."""
    turn_timeout: float = 3600.0
    """Seconds a turn may run."""
    idle_timeout: float = 900.0
    """Seconds a turn may go without a word from the agent."""
    mode: str | None = None
    """The ACP mode its conversations start in (the step's session kinds change it per step);
    None: the agent's own starting mode."""
    sandbox: str = "none"
    """The agent's room: `none` (the worker's user's every right) or `bwrap` (bubblewrap:
    core.agents.sandbox)."""
    network: str = "on"
    """Under a sandbox, `off` leaves the agent loopback only."""


@attrs.frozen
class Step:
    id: str
    workflow_id: str
    name: str
    position: int
    is_start_step: bool = False
    allow_manual_move: bool = True
    wip_limit: int = 0
    pull_from_step_id: str | None = None
    agent_profile_id: str | None = None
    prompt: str = ""
    stage_type: str = "custom"
    color: str = ""
    show_in_command_panel: bool = False
    auto_archive_after_hours: int = 0
    auto_advance_requires_signal: bool = False
    cancel_triggers_turn_complete: bool = False
    events: Events = attrs.field(factory=dict)
    heartbeat_seconds: int | None = None
    """on_heartbeat once per slot of this many seconds for each task at the step (None:
    never; `core.services.heartbeats`)."""

    def actions(self, trigger: str) -> tuple[ActionDecl, ...]:
        return self.events.get(trigger, ())


@attrs.frozen
class Workflow:
    id: str
    workspace_id: str
    name: str
    description: str = ""
    prompt: str = ""
    agent_profile_id: str | None = None
    hidden: bool = False
    template_id: str | None = None
    steps: tuple[Step, ...] = ()
    max_step_arrivals: int = DEFAULT_MAX_STEP_ARRIVALS
    """The runaway-loop limit: a trigger may not bring a task to one step more often than
    this since a person last moved it (0: no limit)."""
    repository: str | None = None
    """A git repository its tasks' agents work in, each task in a worktree of its own."""
    base_branch: str | None = None
    """The branch those worktrees start from (default: the repository's checked-out branch)."""
    retire_worktrees: bool = False
    """A task arriving at the terminal step (`terminal_step`) has its worktree retired as
    archiving does: uncommitted work committed to its branch, the checkout removed."""
    remote: str | None = None
    """The git remote (a name or URL) its tasks' branches are pushed to (`task push`)."""
    forge: Mapping[str, Any] | None = attrs.field(
        default=None, converter=attrs.converters.optional(_frozen_mapping)
    )
    """The forge its pull requests are opened on: kind, repo, url, token_env."""
    setup: str | None = None
    """A shell command run in a task's new worktree before its first turn (under the turn's
    profile's sandbox); its failure ends the turn (R2)."""
    cleanup: str | None = None
    """A shell command run in a task's worktree before it is removed."""

    def step(self, ref: str) -> Step | None:
        """The step named by id, or by name case-insensitively."""
        for step in self.steps:
            if step.id == ref:
                return step
        lowered = ref.casefold()
        for step in self.steps:
            if step.name.casefold() == lowered:
                return step
        return None

    @property
    def start_step(self) -> Step | None:
        for step in self.steps:
            if step.is_start_step:
                return step
        return self.steps[0] if self.steps else None

    @property
    def terminal_step(self) -> Step | None:
        """The last step by position whose name says done (the reference's rule)."""
        found = None
        for step in sorted(self.steps, key=lambda s: s.position):
            if step.name.casefold() in TERMINAL_STEP_NAMES:
                found = step
        return found

    def retires_worktree_at(self, step_id: str) -> bool:
        """Whether a task arriving at `step_id` has its worktree retired: the terminal step
        (`terminal_step`), when the workflow says so (`retire_worktrees`)."""
        terminal = self.terminal_step
        return self.retire_worktrees and terminal is not None and terminal.id == step_id


@attrs.frozen
class Task:
    id: str
    workspace_id: str
    workflow_id: str | None
    workflow_step_id: str | None
    title: str
    description: str = ""
    state: str = "TODO"
    priority: str = "none"
    position: int = 0
    wip_admitted: bool = True
    queued_for_step_id: str | None = None
    queued_at: str | None = None
    project_id: str | None = None
    is_ephemeral: bool = False
    archived_at: str | None = None
    created_at: str = ""
    updated_at: str = ""
    loop_halted_step_id: str | None = None
    """Set when the runaway-loop limit stopped triggers moving the task (the step it would
    have arrived at once too often); a person's move clears it."""
    loop_generation: int = 0
    """Bumped by each move a person makes: the runaway-loop counts start afresh."""
    repository: str | None = None
    """A repository for this task alone (over its workflow's)."""
    base_branch: str | None = None
    workspace: Mapping[str, Any] | None = attrs.field(
        default=None, converter=attrs.converters.optional(_frozen_mapping)
    )
    """The task's git worktree once its first run made it: repository, base_branch, branch,
    path, base_commit, host (`core.services.worktrees`)."""
    parent_id: str | None = None
    """The task this one is a subtask of (`task create --parent`)."""
    blocked_by: tuple[str, ...] = ()
    """The tasks blocking this one (`task block T --by B`), oldest first."""


@attrs.frozen
class Session:
    id: str
    task_id: str
    agent_profile_id: str | None
    state: str = "CREATED"
    is_primary: bool = True
    external: bool = True
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)
    error_message: str | None = None
    started_at: str | None = None
    completed_at: str | None = None
    updated_at: str = ""
    agent: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)
    """What the agent reported of the conversation (acp_session_id, modes, mode,
    config_options, model, plan_mode, ...); `metadata` holds what the workflow wants."""


@attrs.frozen
class Item:
    """One transcript item of a session (CLI.md: an *item*), numbered per session by `seq`."""

    seq: int
    session_id: str
    run_id: str | None
    kind: str
    text: str = ""
    data: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)
    at: str = ""


@attrs.frozen
class Comment:
    """A comment on a task: by a person (`--author`, default `user`) or an agent (its
    profile's name, through the tool server)."""

    id: str
    task_id: str
    author: str
    body: str
    created_at: str
    file: str | None = None
    """A comment on a line of the task's diff: the file's path (None: on the task)."""
    line: int | None = None
    actor: str = "system"
    """Who wrote it (`core.actors`): `user:<name>`, `agent:<profile>` or `system`."""


PERMISSION_STATES: Final = ("pending", "allowed", "denied", "cancelled")
"""A permission request's states (CLI.md); it leaves `pending` once."""


@attrs.frozen
class Permission:
    """An ACP agent's permission request put to a person (`--permissions ask`): the tool
    call it asks about, the options it offers (`{"option_id", "name", "kind"}`), and what was
    chosen, by whom and when."""

    id: str
    task_id: str
    session_id: str
    run_id: str | None
    tool_call: Mapping[str, Any]
    options: Sequence[Mapping[str, Any]]
    state: str
    option_id: str | None
    decided_by: str | None
    created_at: str
    decided_at: str | None
    actor: str = "system"
    """Who answered it (`core.actors`); `system` while pending."""


QUESTION_STATES: Final = ("pending", "answered", "declined", "cancelled")
"""A question's states (CLI.md); it leaves `pending` once."""
FIELD_TYPES: Final = ("string", "number", "integer", "boolean")
"""The types of a question's fields (ACP elicitation's primitive schema types)."""


@attrs.frozen
class QuestionField:
    """One field of a question's form: its name, type, title, whether it is required and the
    values it may take (empty: any of its type)."""

    name: str
    type: str = "string"
    title: str = ""
    required: bool = True
    choices: Sequence[Any] = ()


@attrs.frozen
class Question:
    """A question an agent asked a person (the tool server's `ask`, ACP `elicitation/create`):
    its message and form, and the answer given (an object of field values), by whom, when."""

    id: str
    task_id: str
    session_id: str
    run_id: str | None
    message: str
    fields: Sequence[QuestionField]
    state: str
    answer: Mapping[str, Any] | None
    answered_by: str | None
    created_at: str
    answered_at: str | None


@attrs.frozen
class Participant:
    id: str
    step_id: str
    task_id: str
    """Empty string: a template seat for every task at the step; a task id: a per-task seat."""
    role: str
    agent_profile_id: str
    decision_required: bool = True
    position: int = 0


@attrs.frozen
class Decision:
    id: str
    task_id: str
    step_id: str
    participant_id: str
    decision: str
    comment: str = ""
    decided_at: str = ""
    superseded_at: str | None = None
    decider_type: str = "agent"
    decider_id: str = ""
    role: str = ""
    run_id: str | None = None
    """The run whose agent gave the verdict; one verdict per run and seat."""
    cleared_at: str | None = None
    """When a new entry into the step cleared it (an earlier review round); None: current."""
    actor: str = "system"
    """Who gave the verdict (`core.actors`)."""
    round: int = 1
    """The review round it belongs to at its step, 1 first (computed when read, not stored)."""
    cleared: bool = False
    """Whether a new entry cleared it (`cleared_at` is set): the quorum no longer counts it."""


@attrs.frozen
class Run:
    id: str
    agent_profile_id: str
    task_id: str | None
    workflow_step_id: str | None
    reason: str
    payload: Mapping[str, Any] | None
    idempotency_key: str | None
    coalesce_exempt: bool
    status: str
    coalesced_count: int
    requested_at: str
    claimed_at: str | None = None
    finished_at: str | None = None
    session_id: str | None = None
    error_message: str | None = None
    attempts: int = 0
    max_attempts: int = 3
    claimed_epoch: str | None = None
    usage: Mapping[str, Any] | None = None
    """{"cost_usd", "input_tokens", "output_tokens"} the agent reported over the run, or None."""
    cancel_reason: str | None = None
    """Why it was cancelled (`user`, `step_left`, ...); on a claimed run, a pending request."""
    retry_of: str | None = None
    """The run `runs retry` queued this one after."""
    entry_id: str | None = None
    """The step entry whose on_enter action queued it; superseded once that entry is not the
    task's current entry of the step."""


@attrs.frozen
class StepEntry:
    id: str
    task_id: str
    step_id: str
    entry_seq: int
    entry_path: str
    declaration_digest: str
    terminal: bool
    created_at: str = ""
    epoch: str | None = None
    """The epoch dispatching it; the recovery scan resumes it only once that epoch is dead."""


@attrs.frozen
class Marker:
    entry_id: str
    position: int
    kind: str
    state: str
    epoch: str | None = None
    reason: str | None = None
    cause: str | None = None
    updated_at: str = ""


# -- what a terminal agent failure is (the agent wing decides and handles it, core.agents.failure)
@attrs.frozen
class AgentFailure:
    """One terminal failure of an agent session.

    :param user_initiated: set only by the user cancelling the retry loop (route R6); it is
        an explicit field, never inferred from the message or the route.
    """

    task_id: str
    session_id: str | None
    route: str
    error_message: str = ""
    agent_execution_id: str = ""
    agent_profile_id: str = ""
    run_id: str | None = None
    user_initiated: bool = False

    @property
    def operation_id(self) -> str:
        """The failure's identity: a session hosts several executions, each may fail once."""
        base = f"agent_error:session:{self.session_id}"
        return f"{base}:{self.agent_execution_id}" if self.agent_execution_id else base


@attrs.frozen
class FailureCase:
    """A terminal agent failure as decided once (core.agents.failure): the failure bookkeeping,
    the host's on_agent_error dispatch and every `laneway_agent_failed` observer receive this
    value, so none of them asks again whose task it is.

    :param failure: the failure itself.
    :param owner: the plugin owning the task (Office for its tasks), None for the host's own:
        asked once, under the session's guard, from the task as the failure found it.
    :param found: the task as the failure found it (before the bookkeeping); None when it could
        not be read, which leaves its ownership undecided and the dispatch closed.
    :param task: the task as it stands when the dispatch runs (a reconciled completion signal
        may have moved it); None until the dispatch read it, or when it stopped before.
    :param session: the failed session as the dispatch read it; None until then, or when it
        stopped before or could not read it.
    :param dispatched: whether the host's own dispatch ran on_agent_error.
    """

    failure: AgentFailure
    owner: str | None = None
    found: Task | None = None
    task: Task | None = None
    session: Session | None = None
    dispatched: bool = False

    @property
    def route(self) -> str:
        return self.failure.route
