"""Running one declared non-move action for a trigger (every trigger but on_enter), and the
on_exit list of a step a task left.

The engine runs a trigger's actions through `run`; the arrival layer runs `run_exit` after a
committed step change. Both sit below the engine: nothing here chooses or makes a move.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from core.errors import LanewayError
from core.kernel import Kernel
from core.logs import logger
from core.model import ActionDecl, Step, Task
from core.plugin.kinds import ActionContext, ActionFailed, ConfigError, Outcome, run_executor
from core.plugin.registry import Registry

if TYPE_CHECKING:
    from loguru import Logger


@attrs.frozen
class Fired:
    """One trigger fired for a task at its step: what each action it runs is told. The
    trigger's counterpart of core.entry's `Walk` (an arrival's), built once per evaluation."""

    task: Task
    step: Step
    trigger: str
    log: Logger
    operation_id: str | None = None
    payload: Mapping[str, Any] | None = None
    session_id: str | None = None
    """The trigger's own session (the one that failed, the one whose turn ended)."""
    fired_by_agent: str | None = None
    """The agent whose own act fired the trigger (a comment it wrote): no action wakes it."""


def context(kernel: Kernel, fired: Fired, decl: ActionDecl, uow: Any = None) -> ActionContext:
    # The trigger's own session, else the task's live one.
    session = (
        kernel.read.session(fired.session_id)
        if fired.session_id
        else kernel.read.live_session(fired.task.id)
    )
    return ActionContext(
        task=fired.task,
        step=fired.step,
        trigger=fired.trigger,
        position=decl.position,
        session=session,
        uow=uow,
        services=kernel.services,
        logger=fired.log.bind(action_type=decl.kind, position=decl.position),
        operation_id=fired.operation_id,
        epoch=kernel.epoch(),
        payload=fired.payload,
        fired_by_agent=fired.fired_by_agent,
    )


def run(
    kernel: Kernel,
    registry: Registry,
    decl: ActionDecl,
    fired: Fired,
    *,
    warn_unexecutable: bool = True,
) -> str | None:
    """Run one non-move action; a returned cause means it failed (the caller reports it).

    :param warn_unexecutable: False when the caller already warned about a kind that
        reaches no executor (it is still skipped)."""
    registered = registry.kind(decl.kind)
    action_log = fired.log.bind(action_type=decl.kind, position=decl.position)
    if registered is None:
        if warn_unexecutable:
            action_log.bind(why=registry.unavailable(decl.kind)).warning(
                "no plugin declares this action kind; skipped"
            )
        return None
    if not registered.kind.trigger_ok(fired.trigger):
        action_log.warning("action kind cannot run on this trigger; skipped")
        return None
    kind = registered.kind
    if not registered.executable or kind.execute is None:
        if warn_unexecutable:
            action_log.bind(feature=kind.feature, why=registry.unavailable(decl.kind)).warning(
                "action kind has no executor in this configuration; skipped"
            )
        return None
    try:
        value = kind.validate(decl.config)
    except ConfigError as exc:
        return str(exc)
    if kind.transactional:
        # effect and nothing else in one unit of work; a failure undoes it
        try:
            with kernel.store.transaction() as uow:
                outcome = run_executor(kind.execute, context(kernel, fired, decl, uow), value)
                if outcome is not None and outcome.state == "failed":
                    raise ActionFailed(outcome.cause or "failed")
        except ActionFailed as exc:
            outcome = Outcome.failed(exc.cause)
        except Exception as exc:  # noqa: BLE001 - the commit failed: this trigger only
            outcome = Outcome.failed(f"{type(exc).__name__}: {exc}")
    else:
        outcome = run_executor(kind.execute, context(kernel, fired, decl), value)
    if outcome is not None and outcome.state == "failed":
        return outcome.cause or "failed"
    return None


def run_exit(kernel: Kernel, registry: Registry, task: Task, step_id: str) -> None:
    """The on_exit actions of the step a task left; moves there are ignored."""
    if task.workflow_id is None:
        return
    try:
        workflow = kernel.read.workflow(task.workflow_id)
    except LanewayError:
        return
    step = workflow.step(step_id)
    if step is None:
        return
    log = bound(task, step, "on_exit")
    for decl in step.actions("on_exit"):
        registered = registry.kind(decl.kind)
        if registered is not None and registered.kind.moves:
            continue
        cause = run(kernel, registry, decl, Fired(task, step, "on_exit", log))
        if cause is not None:
            aborted(log, decl, cause)
            return


def aborted(log: Logger, decl: ActionDecl, cause: str) -> None:
    log.bind(action_type=decl.kind, position=decl.position, cause=cause).error(
        "action failed; trigger aborted"
    )


def bound(task: Task, step: Step, trigger: str) -> Logger:
    return logger.bind(
        task_id=task.id,
        step_id=step.id,
        workflow_id=step.workflow_id,
        step_name=step.name,
        trigger=trigger,
    )
