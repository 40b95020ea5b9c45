"""on_agent_error for non-Office tasks: the guard sequence, the operation id, the dispatch.

The guards are first-match-wins, in the spec's order; each is silent or records exactly one
line (at most one record per failure):

1. no bundle or no engine (silent)       2. no session id (silent)
3. user-initiated, route R6 (DEBUG)
4. the session, read once by the failure's session id: gone (DEBUG); unreadable (WARNING)
5. the task, read once by the failure's task id: unreadable or gone (WARNING, fails closed)
6. Office owns the task (silent: Office's own path handles it)
7. ephemeral, archived, or at no step (silent)
8. another session of the task is working (DEBUG)

Then the step's on_agent_error actions are walked against the same bundle's registry (a
WARNING per action with no executor, which is not a dispatch record), and the engine from that
bundle evaluates the trigger under the failure's operation id. Outcome records: INFO when
actions ran, DEBUG when the step declares none, nothing when the operation was already
applied, ERROR when the engine failed (never propagated). Every record carries `task_id`,
`session_id` and an `event` unique to this dispatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.errors import NotFound
from core.logs import logger
from core.model import WORKING_STATES, Task
from core.runtime.failures import AgentFailure

if TYPE_CHECKING:
    from loguru import Logger

    from core.plugin.registry import Registry
    from core.plugin.views import PluginHost
    from core.services.peers import Peers

EVENT = "agent_error.dispatch"


def _record(failure: AgentFailure, **fields: Any) -> Logger:
    return logger.bind(
        event=EVENT, task_id=failure.task_id, session_id=failure.session_id, **fields
    )


def dispatched(
    host: PluginHost,
    failure: AgentFailure,
    *,
    path: str,
    run_id: str | None,
    operation_id: str | None,
    step_id: str | None,
    action_count: int,
) -> None:
    """Record an `agent_error.dispatched` event: the on_agent_error actions ran (`path`: the
    host's dispatch, or the plugin's own). Its own small transaction: the dispatch committed
    in several; failures are rare. Never raises: the failure itself must not be masked."""
    from core.store import events

    try:
        with host.store.transaction() as uow:
            events.record(
                uow,
                "agent_error.dispatched",
                failure.task_id,
                path=path,
                run_id=run_id,
                session_id=failure.session_id,
                operation_id=operation_id,
                step_id=step_id,
                action_count=action_count,
            )
    except Exception as exc:  # noqa: BLE001 - an event is not worth the failure's handling
        _record(failure, cause=f"{type(exc).__name__}: {exc}").warning(
            "agent_error.dispatched event not recorded"
        )


def payload_of(failure: AgentFailure, session_agent_id: str | None) -> dict[str, str]:
    """OnAgentErrorPayload: the failed session, the failed agent (the failure's, else the
    failed session's), the message."""
    return {
        "failed_session_id": failure.session_id or "",
        "failed_agent_id": failure.agent_profile_id or session_agent_id or "",
        "error_message": failure.error_message or "agent failed",
    }


def dispatch(host: Peers, failure: AgentFailure) -> bool:
    """Dispatch on_agent_error for one terminal failure; True when the engine ran it."""
    bundle = host.current_bundle()  # read once: engine, registry and store together
    if bundle is None or bundle.engine is None:
        return False
    if not failure.session_id:
        return False
    if failure.user_initiated:
        _record(failure, route=failure.route).debug("user cancelled the retries: no dispatch")
        return False
    try:
        session = host.sessions.get(failure.session_id)
    except NotFound:
        _record(failure).debug("failed session is gone: nothing to dispatch")
        return False
    except Exception as exc:  # noqa: BLE001 - fail closed on any read problem
        _record(failure, cause=str(exc)).warning("failed session unreadable: no dispatch")
        return False
    try:
        task: Task = host.tasks.get(failure.task_id)
    except Exception as exc:  # noqa: BLE001 - fails closed: unknown ownership is not "kanban"
        _record(failure, cause=str(exc)).warning("task unreadable: no dispatch")
        return False
    if host.tasks.owner(task) is not None:
        return False
    if task.is_ephemeral or task.archived_at is not None or not task.workflow_step_id:
        return False
    try:
        blocking = _working_sibling(host, task, failure.session_id)
    except Exception as exc:  # noqa: BLE001 - fails closed, with the reader's own warning
        logger.bind(task_id=task.id, cause=str(exc)).warning(
            "could not list the task's sessions; not dispatching on_agent_error"
        )
        return False
    if blocking is not None:
        _record(failure, blocking_session_id=blocking).debug(
            "another session of the task is working: no dispatch"
        )
        return False

    _walk(host, bundle.registry, task, failure)
    operation_id = failure.operation_id
    try:
        result = bundle.engine.handle_trigger(
            task.id,
            "on_agent_error",
            session_id=failure.session_id,
            operation_id=operation_id,
            payload=payload_of(failure, session.agent_profile_id),
            label="on_agent_error",
            task=task,
            caller_reports=True,
        )
    except Exception as exc:  # noqa: BLE001 - recovery must never mask the failure itself
        _record(failure, operation_id=operation_id, cause=f"{type(exc).__name__}: {exc}").error(
            "on_agent_error dispatch failed"
        )
        return False
    if result.idempotent:
        return False
    if result.failed:
        _record(
            failure,
            step_id=task.workflow_step_id,
            operation_id=operation_id,
            cause=result.cause,
            action_type=result.failed_action,
            position=result.failed_position,
        ).error("on_agent_error dispatch failed")
        return False
    dispatched(
        host,
        failure,
        path="host",
        run_id=failure.run_id,
        operation_id=operation_id,
        step_id=task.workflow_step_id,
        action_count=result.action_count,
    )
    if result.action_count:
        _record(failure, step_id=task.workflow_step_id, operation_id=operation_id).info(
            "on_agent_error dispatched"
        )
    else:
        _record(failure, step_id=task.workflow_step_id, operation_id=operation_id).debug(
            "on_agent_error dispatched: the step declares no actions"
        )
    return True


def _working_sibling(host: Peers, task: Task, failed_session_id: str) -> str | None:
    for other in host.sessions.list(task=task.id):
        if other.id != failed_session_id and other.state in WORKING_STATES:
            return other.id
    return None


def _walk(host: Peers, registry: Registry, task: Task, failure: AgentFailure) -> None:
    """Warn for each declared action that reaches no executor (moves execute structurally)."""
    # Imported here: office_plugin imports this module, and the engine behind it is more than
    # listing the plugins' commands (`laneway --help`) needs.

    try:
        assert task.workflow_step_id is not None
        _wf, step = host.workflows.step_by_id(task.workflow_step_id)
    except Exception:  # noqa: BLE001 - advisory only: the dispatch still goes to the engine
        return
    for decl in step.actions("on_agent_error"):
        registered = registry.kind(decl.kind)
        if registered is not None and registered.kind.moves:
            continue
        if registered is None or not registered.executable:
            logger.bind(
                workflow_id=step.workflow_id,
                step_id=step.id,
                step_name=step.name,
                action_type=decl.kind,
                task_id=task.id,
                session_id=failure.session_id,
                why=registry.unavailable(decl.kind),
            ).warning("on_agent_error action has no executor")


def why_not_dispatched(host: Peers, task: Task, failed_session_id: str) -> str:
    """Why a failure of `failed_session_id` on `task` dispatched nothing, for a person (the
    `agent fail` command): the guards above that are silent, said in words."""
    owner = host.tasks.owner(task)
    if owner is not None:
        return (
            f"the task is {owner}'s: laneway's own dispatch leaves it alone, and {owner} "
            "dispatches on_agent_error only when an agent fails while running one of its "
            "claimed runs (`laneway worker`), which a failure reported from outside is not"
        )
    if task.archived_at is not None:
        return "the task is archived"
    if task.is_ephemeral:
        return "the task is ephemeral"
    if not task.workflow_step_id:
        return "the task stands at no step"
    blocking = _working_sibling(host, task, failed_session_id)
    if blocking is not None:
        return f"another session of the task ({blocking}) is working"
    return (
        "this failure was handled before (a repeated report), or the dispatch failed (see the log)"
    )
