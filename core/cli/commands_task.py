"""Commands that work a task: tasks, seats, sessions, turns and decisions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.numbers import INT32_MAX, whole
from core.cli.output import (
    decision_result_json,
    emit,
    names_of,
    session_line,
    step_names,
    task_line,
    trigger_json,
    why_not,
    workspace_lines,
)
from core.errors import LanewayError
from core.model import AgentProfile, Participant, Session, Task
from core.shapes import session_json

if TYPE_CHECKING:
    from core.host import Host


def _emit_task(settings: Settings, task: Task, names: Mapping[str, str] | None = None) -> None:
    emit(settings.json, task, [task_line(task, names)])


@click.group()
def task() -> None:
    """Tasks and the routes that move them."""


@task.command("create")
@click.option("--workflow", "workflow", metavar="W", help="Default: the board's only workflow.")
@click.option("--title", required=True, metavar="T")
@click.option("--description", default="", metavar="D")
@click.option("--step", metavar="S", help="Default: the workflow's start step.")
@click.option("--project", metavar="P", help="Project id (makes the task Office-owned).")
@click.option(
    "--repository",
    metavar="PATH",
    help="A git repository for this task alone (over its workflow's).",
)
@click.option("--base-branch", metavar="B", help="The branch its worktree starts from.")
@click.option(
    "--parent",
    metavar="P",
    help="Make it a subtask of P (P gets on_children_completed when all are done).",
)
@pass_settings
def task_create(
    settings: Settings,
    workflow: str | None,
    title: str,
    description: str,
    step: str | None,
    project: str | None,
    repository: str | None,
    base_branch: str | None,
    parent: str | None,
) -> None:
    """Create a task (creation is not an arrival)."""
    with writer(settings) as host:
        created = host.tasks.create(
            workflow=workflow or _only_workflow(host),
            title=title,
            description=description,
            step=step,
            project=project,
            repository=repository,
            base_branch=base_branch,
            parent=parent,
        )
        names = step_names(host, created)
    _emit_task(settings, created, names)


def _only_workflow(host: Host) -> str:
    """The workflow a `task create` without `--workflow` means: the board's only one. A fresh
    board has none, and a newcomer's first `task create` used to end at click's bare
    "Missing option '--workflow'"; both cases now say what to do."""
    found = host.workflows.list()
    if len(found) == 1:
        return found[0].id
    if not found:
        raise click.UsageError(
            "Missing option '--workflow': the board has no workflow yet; create one with "
            "`laneway workflow create --template simple` (`workflow templates` lists them)"
        )
    names = ", ".join(w.name for w in found[:5]) + (", ..." if len(found) > 5 else "")
    raise click.UsageError(
        f"Missing option '--workflow': the board has {len(found)} workflows ({names}); name one"
    )


@task.command("show")
@click.argument("ref", metavar="T")
@pass_settings
def task_show(settings: Settings, ref: str) -> None:
    """Show a task: its line, then its description, parent, blockers and branch."""
    with reader(settings) as host:
        found = host.tasks.get(ref)
        names = step_names(host, found)
        related = {
            other: _other_task(host, other)
            for other in (found.parent_id, *found.blocked_by)
            if other
        }
        holding = [] if settings.json else [b.id for b in host.blockers.unfinished(found.id)]
        children = [] if settings.json else host.tasks.children(found.id)
    details = _task_details(found, related)
    # after the blockers: whether they still hold its agent, and its subtasks (issue 38)
    at = next(n for n, line in enumerate(details) if line.startswith("  blocked by:")) + 1
    details[at:at] = _relation_lines(holding, children)
    emit(settings.json, found, [task_line(found, names), *details, *workspace_lines(found)])


def _relation_lines(holding: list[str], children: list[Task]) -> list[str]:
    """Whether unfinished blockers hold the task's agent, and its subtasks."""
    lines = []
    if holding:
        lines.append(
            f"  its agent does not start until {', '.join(holding)} "
            f"{'is' if len(holding) == 1 else 'are'} finished"
        )
    subtasks = [f"{c.id} {c.title!r} ({c.state})" for c in children]
    lines.append(f"  subtasks: {', '.join(subtasks) if subtasks else 'none'}")
    return lines


def _other_task(host: Host, task_id: str) -> str:
    """Another task as a detail line names it: its id and title (or its id alone, gone)."""
    try:
        other = host.tasks.get(task_id)
    except LanewayError:
        return task_id
    return f"{other.id} {other.title!r} ({other.state})"


def _task_details(task: Task, related: Mapping[str, str]) -> list[str]:
    """The lines `task show` prints under the task's line."""
    description = task.description.splitlines() or ["-"]
    lines = [f"  description: {description[0]}", *(f"    {line}" for line in description[1:])]
    lines.append(
        f"  parent: {related.get(task.parent_id, task.parent_id) if task.parent_id else '-'}"
    )
    blockers = [related.get(b, b) for b in task.blocked_by]
    lines.append(f"  blocked by: {', '.join(blockers) if blockers else 'nothing'}")
    place = task.workspace or {}
    if place.get("branch"):
        lines.append(f"  branch: {place['branch']}  worktree: {place.get('path') or '-'}")
    else:
        lines.append("  branch: - (no worktree yet)")
    return lines


@task.command("diff")
@click.argument("ref", metavar="T")
@click.option("--stat", is_flag=True, help="One line a file instead of the patch.")
@pass_settings
def task_diff(settings: Settings, ref: str, stat: bool) -> None:
    """The task's worktree against its base commit, uncommitted and untracked changes
    included: the patch as `git diff` prints it (`--stat`: one line a file)."""
    from core.services import worktrees

    with reader(settings) as host:
        found = worktrees.diff(host, ref)
    if not settings.json and not stat:
        if found["patch"]:
            click.echo(found["patch"], nl=False)
        if found["truncated"]:
            click.echo(f"laneway: patch cut at {len(found['patch'])} characters", err=True)
        return
    lines = [
        f"{f['status']:<8} +{f['additions']} -{f['deletions']}  {f['path']}" for f in found["files"]
    ]
    if found["truncated"]:
        lines.append(f"(patch cut at {len(found['patch'])} characters)")
    emit(settings.json, found, lines or [f"task {found['task_id']}: no changes"])


@task.command("merge")
@click.argument("ref", metavar="T")
@click.option(
    "--strategy",
    type=click.Choice(["merge", "squash", "rebase"]),
    default="merge",
    show_default=True,
)
@click.option("--into", metavar="B", help="The branch to merge into (default: the task's base).")
@pass_settings
def task_merge(settings: Settings, ref: str, strategy: str, into: str | None) -> None:
    """Merge the task's branch into B in its repository: no checkout is touched, the branch
    moves only by compare-and-swap; a conflict changes nothing and names every path."""
    with writer(settings) as host:
        merged = host.changes.merge(ref, strategy=strategy, into=into)
    lines = []
    if merged["committed"]:
        lines.append(
            f"committed what task {merged['task_id']}'s worktree held uncommitted "
            f"({merged['committed'][:12]})"
        )
    if merged["already"]:
        lines.append(
            f"{merged['into']} already has {merged['branch']} (at {merged['commit'][:12]})"
        )
    else:
        lines.append(
            f"merged {merged['branch']} into {merged['into']} ({merged['strategy']}): "
            f"{merged['commit'][:12]}"
        )
    if merged["notice"]:
        lines.append(merged["notice"])
    emit(settings.json, merged, lines)


@task.command("push")
@click.argument("ref", metavar="T")
@pass_settings
def task_push(settings: Settings, ref: str) -> None:
    """Push the task's branch to its workflow's remote (exactly its commit, leased against
    what laneway last pushed: someone else's push is refused, never overwritten)."""
    with writer(settings) as host:
        pushed = host.changes.push(ref)
    emit(
        settings.json,
        pushed,
        [f"pushed {pushed['branch']} ({pushed['commit'][:12]}) to {pushed['remote']}"],
    )


@task.command("list")
@click.option("--workflow", "workflow", metavar="W")
@click.option("--step", metavar="S", help="A step id, or a step name with --workflow.")
@click.option("--state", metavar="X", help="A task state (TODO, IN_PROGRESS, REVIEW, ...).")
@click.option("--search", metavar="TEXT", help="In the title or description, any case.")
@pass_settings
def task_list(
    settings: Settings,
    workflow: str | None,
    step: str | None,
    state: str | None,
    search: str | None,
) -> None:
    """List tasks; the filters combine."""
    with reader(settings) as host:
        found = host.tasks.list(workflow=workflow, step=step, state=state, search=search)
        names = step_names(host, *found)
    emit(settings.json, found, [task_line(t, names) for t in found])


@task.command("move")
@click.argument("ref", metavar="T")
@click.argument("step", metavar="STEP")
@pass_settings
def task_move(settings: Settings, ref: str, step: str) -> None:
    """Move a task to a step by hand: the step's entry actions run as on any arrival. It
    clears a runaway-loop stop: triggers move the task again."""
    with writer(settings) as host:
        # The move reads the task itself, in its own transaction: the step it left is that
        # read's (no read of its own before it, which would need a connection of its own).
        change = host.tasks.manual_move(ref, step)
        moved = change.task
        names = step_names(host, moved)
    emit(settings.json, moved, [_move_line(change.from_step_id, moved, names)])


def _move_line(source: str | None, after: Task, names: Mapping[str, str]) -> str:
    def name(step_id: str | None) -> str:
        return names.get(step_id, step_id) if step_id else "-"

    src, dst = name(source), name(after.workflow_step_id)
    if not after.wip_admitted:
        return f"task {after.id}: queued for {dst} (the step is full; it enters when room frees)"
    if source == after.workflow_step_id:
        return f"task {after.id}: already at {dst}"
    return f"task {after.id}: moved from {src} to {dst}"


@task.command("update")
@click.argument("ref", metavar="T")
@click.option(
    "--step", metavar="STEP", help="Move it there (an arrival: the step's entry actions run)."
)
@click.option("--title", metavar="TITLE", help="A new title (not empty).")
@click.option("--description", metavar="D", help="A new description (empty clears it).")
@pass_settings
def task_update(
    settings: Settings,
    ref: str,
    step: str | None,
    title: str | None,
    description: str | None,
) -> None:
    """Change a task's title, description or step."""
    if step is None and title is None and description is None:
        raise click.UsageError("task update: give --step, --title or --description")
    with writer(settings) as host:
        updated = host.tasks.update(ref, step=step, title=title, description=description)
        names = step_names(host, updated)
    _emit_task(settings, updated, names)


@task.command("start")
@click.argument("ref", metavar="T")
@click.option("--step", metavar="STEP", help="Default: the workflow's start step.")
@pass_settings
def task_start(settings: Settings, ref: str, step: str | None) -> None:
    """Start a task: it goes to the step (default: its workflow's start step) and the step's
    agent, if one resolves, is started."""
    with writer(settings) as host:
        started = host.tasks.start(ref, step=step)
        names = step_names(host, started)
    _emit_task(settings, started, names)


@task.command("switch-workflow")
@click.argument("ref", metavar="T")
@click.option("--workflow", "workflow", required=True, metavar="W")
@click.option("--step", metavar="S")
@pass_settings
def task_switch_workflow(settings: Settings, ref: str, workflow: str, step: str | None) -> None:
    """Move the task into another workflow (default: to its start step)."""
    with writer(settings) as host:
        switched = host.tasks.switch_workflow(ref, workflow=workflow, step=step)
        names = step_names(host, switched)
    _emit_task(settings, switched, names)


@task.command("cancel")
@click.argument("ref", metavar="T")
@pass_settings
def task_cancel(settings: Settings, ref: str) -> None:
    """Cancel the task's queued and running runs; running agents are stopped.

    A queued run is cancelled at once; a running one is stopped by its worker (in whatever
    process) within a second or so, and ends cancelled, with no on_agent_error.
    """
    with writer(settings) as host:
        cancelled = host.runs.cancel_task(host.tasks.get(ref).id)
    emit(
        settings.json,
        {"cancelled": cancelled},
        [f"cancelled {run_id}" for run_id in cancelled] or ["no queued or running runs"],
    )


@task.command("archive")
@click.argument("ref", metavar="T")
@pass_settings
def task_archive(settings: Settings, ref: str) -> None:
    """Archive a task (its queued and running runs are cancelled first)."""
    with writer(settings) as host:
        archived = host.tasks.archive(ref)
        names = step_names(host, archived)
    _emit_task(settings, archived, names)


@task.command("unarchive")
@click.argument("ref", metavar="T")
@pass_settings
def task_unarchive(settings: Settings, ref: str) -> None:
    """Put an archived task back at its step (not an arrival)."""
    with writer(settings) as host:
        restored = host.tasks.unarchive(ref)
        names = step_names(host, restored)
    _emit_task(settings, restored, names)


@task.command("delete")
@click.argument("ref", metavar="T")
@pass_settings
def task_delete(settings: Settings, ref: str) -> None:
    """Delete a task with its ledger, sessions and seats (its runs are cancelled first)."""
    with writer(settings) as host:
        deleted = host.tasks.delete(ref)
    emit(settings.json, {"deleted": deleted}, [f"deleted {deleted}"])


@task.command("comment")
@click.argument("ref", metavar="T")
@click.argument("text", metavar="TEXT")
@click.option("--author", default="user", metavar="A", help="Default: user.")
@click.option("--file", "file", metavar="PATH", help="A file of the task's diff (with --line).")
@click.option(
    "--line", "line", type=whole(1, INT32_MAX), metavar="N", help="The line of --file commented on."
)
@pass_settings
def task_comment(
    settings: Settings, ref: str, text: str, author: str, file: str | None, line: int | None
) -> None:
    """Comment on a task, or on line N of a file of its diff; fires on_comment at the task's
    step."""
    with writer(settings) as host:
        added = host.comments.add(ref, text, author=author, file=file, line=line)
    where = f" at {added.file}:{added.line}" if added.file is not None else ""
    emit(
        settings.json,
        added,
        [f"comment {added.id} on task {added.task_id}{where} by {added.author}"],
    )


@task.command("comments")
@click.argument("ref", metavar="T")
@pass_settings
def task_comments(settings: Settings, ref: str) -> None:
    """A task's comments, oldest first."""
    with reader(settings) as host:
        found = host.comments.list(ref)
    emit(
        settings.json,
        found,
        [
            f"{c.created_at}  {c.author}: "
            + (f"{c.file}:{c.line}: " if c.file is not None else "")
            + c.body
            for c in found
        ]
        or ["no comments"],
    )


@task.command("history")
@click.argument("ref", metavar="T")
@pass_settings
def task_history(settings: Settings, ref: str) -> None:
    """What happened to a task and who did it: its retained events, oldest first."""
    from core.services.history import task_history as history

    with reader(settings) as host:
        found = history(host, ref)
    emit(
        settings.json,
        found,
        [f"{e['at']}  {e['actor']}  {e['type']}" for e in found] or ["no events retained"],
    )


@task.command("block")
@click.argument("ref", metavar="T")
@click.option("--by", "by", required=True, metavar="B", help="The task blocking T.")
@pass_settings
def task_block(settings: Settings, ref: str, by: str) -> None:
    """B blocks T: T gets on_blocker_resolved when its last blocker reaches a terminal step."""
    with writer(settings) as host:
        blocked = host.blockers.block(ref, by)
        names = step_names(host, blocked)
    _emit_task(settings, blocked, names)


@task.command("unblock")
@click.argument("ref", metavar="T")
@click.option("--by", "by", required=True, metavar="B", help="The task that blocked T.")
@pass_settings
def task_unblock(settings: Settings, ref: str, by: str) -> None:
    """B no longer blocks T."""
    with writer(settings) as host:
        unblocked = host.blockers.unblock(ref, by)
        names = step_names(host, unblocked)
    _emit_task(settings, unblocked, names)


# -- participants --------------------------------------------------------------------------


def _seat_line(seat: Participant, names: Mapping[str, str]) -> str:
    owner = f"task={seat.task_id}" if seat.task_id else "template"
    required = "decides" if seat.decision_required else "no-decision"
    profile = names.get(seat.agent_profile_id, seat.agent_profile_id)
    step = names.get(seat.step_id, seat.step_id)
    return (
        f"{seat.id}  {seat.role}  profile={profile}  step={step}  "
        f"{owner}  {required}  position={seat.position}"
    )


def _one_owner(task_ref: str | None, workflow: str | None) -> None:
    if task_ref is not None and workflow is not None:
        raise click.UsageError("give --task or --workflow, not both")


@click.group()
def participant() -> None:
    """Seats at a step: template seats and per-task seats."""


@participant.command("add")
@click.option("--step", required=True, metavar="S")
@click.option("--role", required=True, metavar="R")
@click.option("--profile", "profile", required=True, metavar="P")
@click.option("--task", "task_ref", metavar="T", help="A per-task seat.")
@click.option("--workflow", "workflow", metavar="W", help="A template seat.")
@click.option(
    "--decision-required/--no-decision-required",
    "decision_required",
    default=None,
    help="Default: reviewers and approvers decide, other roles do not.",
)
@click.option(
    "--position", type=whole(-INT32_MAX - 1, INT32_MAX), default=0, show_default=True, metavar="N"
)
@pass_settings
def participant_add(
    settings: Settings,
    step: str,
    role: str,
    profile: str,
    task_ref: str | None,
    workflow: str | None,
    decision_required: bool | None,
    position: int,
) -> None:
    """Add a seat (a template seat without --task, a per-task seat with it)."""
    _one_owner(task_ref, workflow)
    with writer(settings) as host:
        seat = host.participants.add(
            step=step,
            role=role,
            profile=profile,
            task=task_ref,
            workflow=workflow,
            decision_required=decision_required,
            position=position,
        )
        names = names_of(host, [seat.step_id], [seat.agent_profile_id])
    emit(settings.json, seat, [_seat_line(seat, names)])


@participant.command("list")
@click.option("--step", required=True, metavar="S")
@click.option("--task", "task_ref", metavar="T")
@click.option("--workflow", "workflow", metavar="W")
@pass_settings
def participant_list(
    settings: Settings, step: str, task_ref: str | None, workflow: str | None
) -> None:
    """List the seats at a step (merged with the task's own when --task is given)."""
    _one_owner(task_ref, workflow)
    with reader(settings) as host:
        seats = host.participants.list(step=step, task=task_ref, workflow=workflow)
        names = names_of(host, [s.step_id for s in seats], [s.agent_profile_id for s in seats])
    emit(settings.json, seats, [_seat_line(s, names) for s in seats])


@participant.command("remove")
@click.argument("participant_id", metavar="ID")
@pass_settings
def participant_remove(settings: Settings, participant_id: str) -> None:
    """Remove one seat by its id (`participant list` shows it), a duplicate one too."""
    with writer(settings) as host:
        removed = host.participants.remove(participant_id)
    emit(settings.json, {"removed": removed}, [f"participant {removed} removed"])


# -- sessions and turns --------------------------------------------------------------------


def _session_line(session: Session, profiles: Iterable[AgentProfile] = ()) -> str:
    return session_line(session, {p.id: p.name for p in profiles})


class _SessionGroup(click.Group):
    """`session`: its agent-driving subcommands (send, cancel-retry, log) live with the
    agents commands (core.cli.commands_agents), which load the worker; they join the group
    when it is first used, so `session list` stays light."""

    _joined = False

    def _join(self) -> None:
        if not self._joined:
            self._joined = True
            from core.cli.commands_agents import SESSION_COMMANDS

            for sub in SESSION_COMMANDS:
                self.add_command(sub)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._join()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._join()
        return super().list_commands(ctx)


@click.group(cls=_SessionGroup)
def session() -> None:
    """Agent sessions."""


@session.command("start")
@click.argument("ref", metavar="T")
@click.option("--profile", "profile", metavar="P")
@pass_settings
def session_start(settings: Settings, ref: str, profile: str | None) -> None:
    """Open a session for an agent that runs outside laneway."""
    with writer(settings) as host:
        started = host.sessions.start(ref, profile=profile)
        profiles = host.profiles.list()
    emit(settings.json, session_json(started, profiles), [_session_line(started, profiles)])


@session.command("list")
@click.option("--task", "task_ref", required=True, metavar="T")
@pass_settings
def session_list(settings: Settings, task_ref: str) -> None:
    """List a task's sessions."""
    with reader(settings) as host:
        found = host.sessions.list(task=task_ref)
        profiles = host.profiles.list()
    emit(
        settings.json,
        [session_json(s, profiles) for s in found],
        [_session_line(s, profiles) for s in found],
    )


def _emit_trigger(settings: Settings, result: Mapping[str, Any], names: Mapping[str, str]) -> None:
    shaped = trigger_json(result)
    task_id = shaped["task"]["id"]

    def name(step_id: str | None) -> str:
        return names.get(step_id, step_id) if step_id else "-"

    if shaped["transitioned"]:
        line = (
            f"task {task_id}: moved from {name(shaped['from_step_id'])} "
            f"to {name(shaped['to_step_id'])}"
        )
        if not shaped["task"]["wip_admitted"]:
            line += " (queued: the step is full)"
    else:
        at = name(shaped["task"]["workflow_step_id"])
        line = f"task {task_id}: no transition at {at}{why_not(shaped)}"
    emit(settings.json, shaped, [line])


@click.group()
def turn() -> None:
    """Turn boundaries: they fire on_turn_start and on_turn_complete."""


@turn.command("start")
@click.argument("ref", metavar="T")
@click.option("--session", "session_id", metavar="S", help="Default: the task's live session.")
@pass_settings
def turn_start(settings: Settings, ref: str, session_id: str | None) -> None:
    """Fire on_turn_start."""
    with writer(settings) as host:
        result = host.turns.start(ref, session_id)
        names = step_names(host, result["task"])
    _emit_trigger(settings, result, names)


@turn.command("complete")
@click.argument("ref", metavar="T")
@click.option("--session", "session_id", metavar="S", help="Default: the task's live session.")
@pass_settings
def turn_complete(settings: Settings, ref: str, session_id: str | None) -> None:
    """Fire on_turn_complete."""
    with writer(settings) as host:
        result = host.turns.complete(ref, session_id)
        names = step_names(host, result["task"])
    _emit_trigger(settings, result, names)


# -- decisions -----------------------------------------------------------------------------


@click.group()
def decision() -> None:
    """Participant verdicts."""


@decision.command("record")
@click.option("--task", "task_ref", required=True, metavar="T")
@click.option("--step", required=True, metavar="S")
@click.option("--participant", "participant_id", required=True, metavar="P")
@click.option(
    "--verdict",
    required=True,
    metavar="V",
    help="approved, rejected or changes_requested.",
)
@click.option("--comment", default="", metavar="C")
@pass_settings
def decision_record(
    settings: Settings,
    task_ref: str,
    step: str,
    participant_id: str,
    verdict: str,
    comment: str,
) -> None:
    """Record a seat's verdict; a guarded transition it releases fires at once."""
    # --verdict is a plain string rather than click.Choice: a wrong verdict is bad input
    # (exit 1, named by the service), not a usage error.
    with writer(settings) as host:
        result = host.decisions.record(task_ref, step, participant_id, verdict, comment=comment)
        names = step_names(host, host.tasks.get(task_ref))
    made = result["decision"]
    shaped = decision_result_json(result)
    line = f"{made.id}  {made.decision}  participant={made.participant_id}"
    if shaped["transitioned"]:
        to = shaped["to_step_id"]
        line += f"  -> moved to {names.get(to, to)}"
    else:
        line += f"  -> no transition{why_not(shaped)}"
    emit(settings.json, shaped, [line])


@decision.command("list")
@click.option("--task", "task_ref", required=True, metavar="T")
@click.option("--step", metavar="S", help="Default: every step.")
@click.option(
    "--all", "all_rounds", is_flag=True, help="Add the rounds a new entry into the step cleared."
)
@pass_settings
def decision_list(settings: Settings, task_ref: str, step: str | None, all_rounds: bool) -> None:
    """The current round's verdicts (what the quorum counts); --all keeps earlier rounds."""
    with reader(settings) as host:
        found = host.decisions.for_task(task_ref, step, all_rounds=all_rounds)
        names = names_of(host, (d.step_id for d in found), ())
    lines = [
        f"{d.id}  {names.get(d.step_id, d.step_id)}  round {d.round}"
        f"{' (cleared)' if d.cleared else ''}  {d.decision}  participant={d.participant_id}"
        f"{'  superseded' if d.superseded_at else ''}{f'  {d.comment!r}' if d.comment else ''}"
        for d in found
    ]
    emit(settings.json, found, lines or ["no decisions"])


COMMANDS: tuple[click.Command, ...] = (task, participant, session, turn, decision)
