"""Office: reviewer and approver fan-out, decisions and quorum, runs, Office task ownership."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from office_plugin import quorum
from office_plugin.kinds import declarations
from plugins import api
from plugins.api import (
    ActionKind,
    AgentFailure,
    FailureCase,
    GuardKind,
    PluginHost,
    Task,
    Workspace,
    hookimpl,
)

if TYPE_CHECKING:
    import click

__version__ = "0.1.0"
NAME = "office"


@hookimpl
def laneway_register_action_kinds(register: Callable[[ActionKind], None]) -> None:
    for kind in declarations():
        register(kind)


@hookimpl
def laneway_register_guards(register: Callable[[GuardKind], None]) -> None:
    register(quorum.GUARD)


@hookimpl
def laneway_task_ownership(task: Task, workspace: Workspace) -> str | None:
    """Office owns tasks with a project, and tasks in the workspace's office workflow."""
    if task.project_id or (
        workspace.office_workflow_id is not None
        and task.workflow_id == workspace.office_workflow_id
    ):
        return NAME
    return None


@hookimpl
def laneway_agent_failed(host: PluginHost, failure: AgentFailure, case: FailureCase) -> None:
    """Office's own on_agent_error path: for an Office task whose failed session was running a
    claimed Office run, under the run's own operation id. Without such a run nothing fires
    (the host's dispatch skips Office tasks), so one failure dispatches at most once. Whose
    task it is, and the task as it stands, are the host's decided case's: Office asks
    neither again."""
    if failure.user_initiated or failure.run_id is None:
        return
    # imported here: loguru (with asyncio, multiprocessing) is for the processes that log,
    # not for every command that loads the plugin (issue 45 item 6)
    from loguru import logger

    bundle = host.bundle  # read once: the feature switch and the engine from one publication
    if not bundle.registry.features.enabled(NAME):
        # Office off means off: its tasks are not dispatched nor moved by anyone
        logger.bind(
            task_id=failure.task_id, session_id=failure.session_id, run_id=failure.run_id
        ).debug("office is off: its on_agent_error path does not run")
        return
    task = case.task
    if case.owner != NAME or task is None:
        # not Office's, or the host's dispatch stopped before the task (session gone/unreadable)
        return
    run = host.runs.get(failure.run_id)
    if run is None or run.status != "claimed" or run.task_id != task.id:
        return
    engine = bundle.engine
    if engine is None:  # a bundle built without an engine evaluates no trigger
        return
    result = engine.handle_trigger(
        task.id,
        "on_agent_error",
        session_id=failure.session_id,
        operation_id=f"agent_error:{run.id}",
        payload=api.payload_of(failure, run.agent_profile_id),
        label="on_agent_error",
        task=task,
    )
    if not result.idempotent:
        api.dispatched(
            host,
            failure,
            path=NAME,
            run_id=run.id,
            operation_id=f"agent_error:{run.id}",
            step_id=task.workflow_step_id,
            action_count=result.action_count,
        )
        logger.bind(
            task_id=task.id,
            session_id=failure.session_id,
            run_id=run.id,
            action_count=result.action_count,
        ).info("office on_agent_error dispatched")


@hookimpl
def laneway_cli_commands(group: click.Group) -> None:
    """`laneway demo`: Office's showcase (imported only when the command line starts)."""
    from office_plugin.cli import demo

    group.add_command(demo)
