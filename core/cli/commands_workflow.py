"""Workflow and agent-profile commands."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any, TypeVar

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.numbers import FINITE, INT32_MAX, whole
from core.cli.output import emit, profile_line, template_json, workflow_json, workflow_lines
from core.errors import LanewayError
from core.workflows import to_yaml


@click.group()
def workflow() -> None:
    """Workflows: templates, import, export, checks."""


@workflow.command("templates")
@pass_settings
def workflow_templates(settings: Settings) -> None:
    """List the shipped templates, hidden ones included (no database needed)."""
    from core.workflows import shipped_templates

    # shipped with the code, so read without a host: no database is opened, made or required
    decls = shipped_templates()
    found = [template_json(d) for d in decls]
    lines = [
        f"{t['id']}  {t['name']}  ({t['steps']} steps){' [hidden]' if t['hidden'] else ''}"
        for t in found
    ]
    emit(settings.json, found, lines)


@workflow.command("create")
@click.option("--template", "template_id", required=True, metavar="ID", help="Template id.")
@click.option("--name", metavar="N", help="Name of the new workflow (default: the template's).")
@pass_settings
def workflow_create(settings: Settings, template_id: str, name: str | None) -> None:
    """Instantiate a shipped template."""
    with writer(settings) as host:
        wf = host.workflows.create_from_template(template_id, name=name)
    emit(settings.json, workflow_json(wf), workflow_lines(wf, with_steps=True))


@workflow.command("import")
@click.argument("file", metavar="FILE")
@pass_settings
def workflow_import(settings: Settings, file: str) -> None:
    """Import an internal template file or a portable export (all or nothing)."""
    # FILE is a plain string, not click.Path(exists=True): a missing file is a user mistake
    # (exit 1, named by the import's own message), not a usage error (exit 2).
    # A profile name that resolves to nothing is logged as a warning (stderr), not refused:
    # the profile may be added after the import.
    with writer(settings) as host:
        imported = host.workflows.import_file(file)
    lines = [line for wf in imported for line in workflow_lines(wf, with_steps=False)]
    emit(settings.json, [workflow_json(wf) for wf in imported], lines)


@workflow.command("list")
@pass_settings
def workflow_list(settings: Settings) -> None:
    """List workflows, hidden ones too."""
    with reader(settings) as host:
        found = host.workflows.list()
    lines = [line for wf in found for line in workflow_lines(wf, with_steps=False)]
    emit(settings.json, [workflow_json(wf) for wf in found], lines)


@workflow.command("show")
@click.argument("ref", metavar="W")
@pass_settings
def workflow_show(settings: Settings, ref: str) -> None:
    """Show a workflow (by id or name) and its steps."""
    with reader(settings) as host:
        wf = host.workflows.get(ref)
    emit(settings.json, workflow_json(wf), workflow_lines(wf, with_steps=True))


@workflow.command("set")
@click.argument("ref", metavar="W")
@click.option(
    "--max-step-arrivals",
    type=whole(0, INT32_MAX),
    metavar="N",
    help="The runaway-loop limit: how often a trigger may bring a task to one step (0: none).",
)
@click.option(
    "--repository",
    metavar="PATH",
    help="A git repository: each task's agents work in a worktree of it ('' clears it).",
)
@click.option(
    "--base-branch",
    metavar="B",
    help="The branch the worktrees start from (default: the repository's checked-out one).",
)
@click.option(
    "--retire-worktrees/--keep-worktrees",
    default=None,
    help="Whether a task reaching the terminal step has its worktree removed, its uncommitted "
    "work committed to its branch (default: keep).",
)
@click.option(
    "--remote",
    metavar="R",
    help="A git remote (a name or URL) task branches are pushed to ('' clears it).",
)
@click.option(
    "--setup",
    metavar="CMD",
    help="A shell command run in a task's new worktree before its first turn, under the "
    "agent's sandbox; its failure fails the turn ('' clears it).",
)
@click.option(
    "--cleanup",
    metavar="CMD",
    help="A shell command run in a task's worktree before it is removed ('' clears it).",
)
@click.option(
    "--forge", metavar="NAME", help="Where pull requests are opened: github ('' clears it)."
)
@click.option("--forge-repo", metavar="OWNER/NAME", help="The repository on the forge.")
@click.option("--forge-url", metavar="URL", help="The forge's API root (default its own).")
@click.option(
    "--forge-token-env", metavar="VAR", help="The variable the token is read from at run time."
)
@pass_settings
def workflow_set(
    settings: Settings,
    ref: str,
    max_step_arrivals: int | None,
    repository: str | None,
    base_branch: str | None,
    retire_worktrees: bool | None,
    remote: str | None,
    setup: str | None,
    cleanup: str | None,
    forge: str | None,
    forge_repo: str | None,
    forge_url: str | None,
    forge_token_env: str | None,
) -> None:
    """Change a workflow's settings."""
    if (
        max_step_arrivals is None
        and repository is None
        and base_branch is None
        and retire_worktrees is None
        and remote is None
        and setup is None
        and cleanup is None
        and forge is None
    ):
        raise click.UsageError(
            "give --max-step-arrivals, --repository, --base-branch, --remote, --setup, "
            "--cleanup, --forge or --retire-worktrees/--keep-worktrees"
        )
    if forge is None and (forge_repo or forge_url or forge_token_env):
        raise click.UsageError("--forge-repo, --forge-url and --forge-token-env go with --forge")
    with writer(settings) as host:
        wf = host.workflows.get(ref)
        if max_step_arrivals is not None:
            wf = host.workflows.set_max_step_arrivals(wf.id, max_step_arrivals)
        if repository is not None or base_branch is not None:
            wf = host.workflows.set_repository(wf.id, repository, base_branch)
        if retire_worktrees is not None:
            wf = host.workflows.set_retire_worktrees(wf.id, retire_worktrees)
        if remote is not None:
            wf = host.workflows.set_remote(wf.id, remote)
        if setup is not None or cleanup is not None:
            wf = host.workflows.set_commands(wf.id, setup=setup, cleanup=cleanup)
        if forge is not None:
            wf = host.changes.set_forge(
                wf.id, forge, repo=forge_repo, url=forge_url, token_env=forge_token_env
            )
    emit(settings.json, workflow_json(wf), workflow_lines(wf, with_steps=False))


@workflow.command("delete")
@click.argument("ref", metavar="W")
@pass_settings
def workflow_delete(settings: Settings, ref: str) -> None:
    """Delete a workflow, its steps and their seats; refused while it has tasks."""
    with writer(settings) as host:
        name = host.workflows.get(ref).name
        removed = host.workflows.delete(ref)
    emit(settings.json, {"removed": removed}, [f"workflow {name!r} deleted ({removed})"])


@workflow.command("export")
@click.argument("ref", metavar="W")
@pass_settings
def workflow_export(settings: Settings, ref: str) -> None:
    """Write a workflow as a portable YAML document on stdout (JSON with --json)."""
    with reader(settings) as host:
        document = host.workflows.export(ref)
    if settings.json:
        emit(True, document, [])
    else:
        click.echo(to_yaml(document), nl=False)


@workflow.command("check")
@click.argument("ref", metavar="W")
@pass_settings
def workflow_check(settings: Settings, ref: str) -> None:
    """Report declarations the loaded plugins cannot run and profile names that resolve to
    nothing, warn where a task would wait for nobody (a step whose auto_start_agent finds no
    agent, a board where no agent can start), and list every agent the workflow can start or
    seat. Exits 1 when there is a problem (warnings alone: 0).

    A workflow file can start the board's agents: review one like code before importing it.
    """
    with reader(settings) as host:
        workflow = host.workflows.get(ref)
        problems = host.workflows.check(workflow.id)
        warnings = host.workflows.warnings(workflow)
        agents = host.workflows.agents_of(workflow)
    lines = list(problems) or ["no problems"]
    lines += [f"warning: {w}" for w in warnings]
    lines.append(f"agents this workflow can start or seat: {len(agents) or 'none'}")
    lines += [f"  {a.line(workflow.name)}" for a in agents]
    result = {
        "problems": problems,
        "warnings": warnings,
        "agents": [a.as_dict() for a in agents],
    }
    emit(settings.json, result, lines)
    if problems:
        # the report is printed whole; the exit code lets a script (or CI) stop on it
        raise SystemExit(1)


@click.group()
def profile() -> None:
    """Agent profiles."""


def _parse_env(
    items: tuple[str, ...], option: str = "--env", value: str = "VALUE"
) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, sep, found = item.partition("=")
        if not sep or not key.strip() or (option != "--env" and not found.strip()):
            raise LanewayError(f"{option} {item!r}: expected KEY={value}")
        env[key] = found
    return env


def _split_command(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError as exc:
        raise LanewayError(f"--command {command!r}: {exc}") from None


def _kinds(value: str) -> list[str]:
    """`--auto-allow read,edit`: the kinds, blanks dropped (an empty value lists none)."""
    return [k.strip() for k in value.split(",") if k.strip()]


_F = TypeVar("_F", bound=Callable[..., Any])


def _profile_options(*, for_set: bool) -> Callable[[_F], _F]:
    """The options `profile add` and `profile set` share. For `set` nothing has a default:
    an option not given keeps the stored value, and an env option given replaces it."""
    when = " (replaces the stored ones)" if for_set else ""
    options = [
        click.option(
            "--command", "command", required=not for_set, metavar="CMD", help="Split like a shell."
        ),
        click.option(
            "--role",
            default=None if for_set else "worker",
            show_default=not for_set,
            metavar="R",
        ),
        click.option(
            "--protocol",
            default=None if for_set else "exec",
            show_default=not for_set,
            metavar="exec|acp",
            help="How laneway talks to the agent: exec (a process per turn) or acp (the Agent "
            "Client Protocol; docs/agents.md).",
        ),
        click.option(
            "--permissions",
            default=None if for_set else "ask",
            show_default=not for_set,
            metavar="ask|allow|deny",
            help="An ACP agent's permission request: ask a person, or allow or deny it.",
        ),
        click.option(
            "--auto-allow",
            "auto_allow",
            default=None,
            metavar="KINDS",
            help="ACP tool kinds allowed without asking, comma-separated "
            "(read, edit, delete, move, search, execute, think, fetch, other).",
        ),
        click.option(
            "--turn-timeout",
            "turn_timeout",
            type=FINITE,
            default=None if for_set else 3600.0,
            show_default=not for_set,
            metavar="S",
            help="Seconds a turn may run.",
        ),
        click.option(
            "--idle-timeout",
            "idle_timeout",
            type=FINITE,
            default=None if for_set else 900.0,
            show_default=not for_set,
            metavar="S",
            help="Seconds a turn may go without a word from the agent.",
        ),
        click.option(
            "--mode",
            "mode",
            default=None,
            metavar="M",
            help="The ACP mode the profile's conversations start in (the step's session kinds "
            "still change it per step; '' on set: the agent's own). docs/agents.md lists each "
            "adapter's modes.",
        ),
        click.option(
            "--sandbox",
            "sandbox",
            default=None if for_set else "none",
            show_default=not for_set,
            metavar="none|bwrap",
            help="The agent's room: bwrap runs it under bubblewrap, seeing the machine "
            "read-only and writing only to its worktree, its home and temporary directories "
            '(docs/agents.md, "Sandbox").',
        ),
        click.option(
            "--network",
            "network",
            default=None if for_set else "on",
            show_default=not for_set,
            metavar="on|off",
            help="Under a sandbox, off leaves the agent loopback only.",
        ),
        click.option(
            "--env", "env", multiple=True, metavar="K=V", help=f"Stored. Repeatable{when}."
        ),
        click.option(
            "--env-from",
            "env_from",
            multiple=True,
            metavar="K=VAR",
            help=f"K gets the worker's VAR at run time (not stored). Repeatable{when}.",
        ),
        click.option(
            "--pass-env",
            "pass_env",
            multiple=True,
            metavar="VAR",
            help=f"Pass the worker's VAR to the agent. Repeatable{when}.",
        ),
        click.option(
            "--requires-env",
            "requires_env",
            multiple=True,
            metavar="VAR",
            help=f"The worker must have VAR set, or the run fails at start; passed through. "
            f"Repeatable{when}.",
        ),
    ]

    def apply(fn: _F) -> _F:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return apply


def _profile_changes(given: dict[str, Any]) -> dict[str, Any]:
    """The command line's options as ProfileService arguments, parsed before the host opens
    (a typo must not cost a lock and a recovery scan); options not given are left out."""
    changes: dict[str, Any] = {}
    for option in (
        "role",
        "protocol",
        "permissions",
        "turn_timeout",
        "idle_timeout",
        "mode",
        "sandbox",
        "network",
    ):
        if given[option] is not None:
            changes[option] = given[option]
    if given["command"] is not None:
        changes["command"] = _split_command(given["command"])
    if given["auto_allow"] is not None:
        changes["auto_allow"] = _kinds(given["auto_allow"])
    if given["env"]:
        changes["env"] = _parse_env(given["env"])
    if given["env_from"]:
        changes["env_from"] = _parse_env(given["env_from"], "--env-from", "VAR")
    for option in ("pass_env", "requires_env"):
        if given[option]:
            changes[option] = list(given[option])
    return changes


@profile.command("add")
@click.argument("name")
@_profile_options(for_set=False)
@pass_settings
def profile_add(settings: Settings, /, name: str, **given: Any) -> None:
    """Add an agent profile.

    An agent sees only PATH, HOME, LANG, LC_ALL, LC_CTYPE and TMPDIR from the worker, the
    variables this profile passes or takes (--pass-env, --requires-env, --env-from), its
    --env values and the turn's LANEWAY_* variables.
    """
    changes = _profile_changes(given)
    with writer(settings) as host:
        added = host.profiles.add(name, **changes)
    emit(settings.json, added, [profile_line(added)])


@profile.command("set")
@click.argument("name")
@_profile_options(for_set=True)
@pass_settings
def profile_set(settings: Settings, /, name: str, **given: Any) -> None:
    """Change an agent profile: any option of `profile add` but its name.

    Options not given keep their stored values; an env option given (--env, --env-from,
    --pass-env, --requires-env) replaces the stored ones; --auto-allow '' lists none.
    """
    changes = _profile_changes(given)
    with writer(settings) as host:
        changed = host.profiles.set(name, **changes)
    emit(settings.json, changed, [profile_line(changed)])


@profile.command("list")
@pass_settings
def profile_list(settings: Settings) -> None:
    """List agent profiles."""
    with reader(settings) as host:
        found = host.profiles.list()
    emit(settings.json, found, [profile_line(p) for p in found])


@profile.command("remove")
@click.argument("name")
@pass_settings
def profile_remove(settings: Settings, name: str) -> None:
    """Remove an agent profile (its budgets with it); refused while it has queued or running
    runs, a seat, or is a step's or workflow's agent."""
    with writer(settings) as host:
        found = host.profiles.get(name)
        removed = host.profiles.remove(found.id)
    emit(settings.json, {"removed": removed}, [f"profile {found.name!r} removed ({removed})"])


COMMANDS: tuple[click.Command, ...] = (workflow, profile)
