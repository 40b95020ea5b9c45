"""An agent's terminal failure: decided once, the bookkeeping under the session's guard, then
on_agent_error.

`decide` reads the failure's task once and asks its owner once, into a `FailureCase` (a frozen
value of core.model); the bookkeeping, the host's dispatch and every `laneway_agent_failed`
observer (Office's own path among them) receive that case, so none asks again whose task it
is. The dispatch adds what it reads (the session and the task as they stand then, per the
guards below) to the case it hands on.

`Failures.settle` runs the bookkeeping in the order the agent-error spec fixes (session state
-> task review state -> pending step-completion reconciliation -> cleanup launched, not
awaited) under the session's guard; the guard is then released and the dispatch runs,
synchronously on the same thread, so an action that needs the guard again (auto_start_agent)
finds it free instead of deadlocking.

The dispatch, for non-Office tasks: the guard sequence, the operation id, the engine.

The guards are first-match-wins, in the spec's order; each is silent or records exactly one
line (at most one record per failure):

1. no bundle or no engine (silent)       2. no session id (silent)
3. user-initiated, route R6 (DEBUG)
4. the session, read once by the failure's session id: gone (DEBUG); unreadable (WARNING)
5. the task, read once by the failure's task id: unreadable or gone (WARNING, fails closed);
   a task the decision could not read has no decided owner (WARNING, fails closed too)
6. a plugin owns the task, as the case decided (silent: Office's own path handles it)
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

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from core.agents.guards import SessionGuards
from core.agents.stops import InFlight
from core.agents.values import TurnOutcome
from core.errors import LanewayError, NotFound
from core.logs import logger
from core.model import WORKING_STATES, AgentFailure, FailureCase, Task

if TYPE_CHECKING:
    from loguru import Logger

    from core.agents.ports import AgentPort
    from core.plugin.registry import Registry
    from core.plugin.views import PluginHost

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


def decide(host: AgentPort, failure: AgentFailure) -> FailureCase:
    """The failure's case, decided once: its task read once and its owner asked once (an
    unreadable task leaves the owner undecided, the bookkeeping treats it as the host's own
    and the dispatch stays closed)."""
    try:
        task = host.tasks.get(failure.task_id)
    except LanewayError:
        return FailureCase(failure)
    return FailureCase(failure, owner=host.tasks.owner(task), found=task)


def dispatch(host: AgentPort, failure: AgentFailure) -> bool:
    """Decide `failure` and dispatch on_agent_error for it, with no bookkeeping (a caller that
    has none to do); True when the engine ran it."""
    return dispatch_case(host, FailureCase(failure), undecided=True).dispatched


def dispatch_case(host: AgentPort, case: FailureCase, *, undecided: bool = False) -> FailureCase:
    """Dispatch on_agent_error for one decided failure; the case with what the dispatch read
    (the session, the task as it stands now) and whether the engine ran it. An `undecided`
    case (no bookkeeping decided it) is decided here, once, from the task the dispatch reads."""
    failure = case.failure
    bundle = host.current_bundle()  # read once: engine, registry and store together
    if bundle is None or bundle.engine is None:
        return case
    if not failure.session_id:
        return case
    if failure.user_initiated:
        _record(failure, route=failure.route).debug("user cancelled the retries: no dispatch")
        return case
    try:
        session = host.sessions.get(failure.session_id)
    except NotFound:
        _record(failure).debug("failed session is gone: nothing to dispatch")
        return case
    except Exception as exc:  # noqa: BLE001 - fail closed on any read problem
        _record(failure, cause=str(exc)).warning("failed session unreadable: no dispatch")
        return case
    read = attrs.evolve(case, session=session)
    try:
        # as it stands now: a reconciled completion signal may have moved it since the decision
        task: Task = host.tasks.get(failure.task_id)
    except Exception as exc:  # noqa: BLE001 - fails closed: unknown ownership is not "kanban"
        _record(failure, cause=str(exc)).warning("task unreadable: no dispatch")
        return read
    read = attrs.evolve(read, task=task)
    if undecided:
        case = read = attrs.evolve(read, found=task, owner=host.tasks.owner(task))
    if case.found is None:
        # the decision could not read the task, so its owner is undecided: not "kanban" either
        _record(failure, cause="the task was unreadable when the failure was decided").warning(
            "task unreadable: no dispatch"
        )
        return read
    if case.owner is not None:
        return read
    if task.is_ephemeral or task.archived_at is not None or not task.workflow_step_id:
        return read
    try:
        blocking = _working_sibling(host, task, failure.session_id)
    except Exception as exc:  # noqa: BLE001 - fails closed, with the reader's own warning
        logger.bind(task_id=task.id, cause=str(exc)).warning(
            "could not list the task's sessions; not dispatching on_agent_error"
        )
        return read
    if blocking is not None:
        _record(failure, blocking_session_id=blocking).debug(
            "another session of the task is working: no dispatch"
        )
        return read

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
        return read
    if result.idempotent:
        return read
    if result.failed:
        _record(
            failure,
            step_id=task.workflow_step_id,
            operation_id=operation_id,
            cause=result.cause,
            action_type=result.failed_action,
            position=result.failed_position,
        ).error("on_agent_error dispatch failed")
        return read
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
    return attrs.evolve(read, dispatched=True)


def _working_sibling(host: AgentPort, task: Task, failed_session_id: str) -> str | None:
    for other in host.sessions.list(task=task.id):
        if other.id != failed_session_id and other.state in WORKING_STATES:
            return other.id
    return None


def _walk(host: AgentPort, registry: Registry, task: Task, failure: AgentFailure) -> None:
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


def why_not_dispatched(host: AgentPort, case: FailureCase) -> str:
    """Why a decided failure dispatched nothing, for a person (the `agent fail` command): the
    guards above that are silent, said in words, from the case as the dispatch left it."""
    owner = case.owner
    if owner is not None:
        return (
            f"the task is {owner}'s: laneway's own dispatch leaves it alone, and {owner} "
            "dispatches on_agent_error only when an agent fails while running one of its "
            "claimed runs (`laneway worker`), which a failure reported from outside is not"
        )
    task = case.task
    if task is None or case.failure.session_id is None:
        return "the failed session or its task could not be read (see the log)"
    if task.archived_at is not None:
        return "the task is archived"
    if task.is_ephemeral:
        return "the task is ephemeral"
    if not task.workflow_step_id:
        return "the task stands at no step"
    blocking = _working_sibling(host, task, case.failure.session_id)
    if blocking is not None:
        return f"another session of the task ({blocking}) is working"
    return (
        "this failure was handled before (a repeated report), or the dispatch failed (see the log)"
    )


class Failures:
    """This process's handling of its agents' terminal failures."""

    def __init__(self, peers: AgentPort, guards: SessionGuards, in_flight: InFlight) -> None:
        self.peers = peers
        self.guards = guards
        self.in_flight = in_flight

    def fail_and_dispatch(self, failure: AgentFailure) -> TurnOutcome:
        """Bookkeeping under the session guard, then the dispatch with the guard released."""
        dispatch = self.handle_failure(failure)
        dispatch()
        return TurnOutcome(
            failure.session_id or "", ok=False, error=failure.error_message, route=failure.route
        )

    def handle_failure(self, failure: AgentFailure) -> Callable[[], bool]:
        """The failure bookkeeping. Returns the dispatch for the caller to run once it has
        released the guard; it answers whether on_agent_error was dispatched (a sessionless
        failure has no guard and dispatches nothing)."""
        settle = self.settle(failure)
        return lambda: settle().dispatched

    def settle(self, failure: AgentFailure) -> Callable[[], FailureCase]:
        """Decide the case and do the bookkeeping under the session's guard; the dispatch
        handed back (to run once the guard is released) answers the case as it left it."""
        undecided = FailureCase(failure)
        if not failure.session_id:
            return lambda: undecided
        with self.guards.guard(failure.session_id):
            # one transaction: the fence holds the run's row while the failure's states are
            # written, so a worker that lost the claim meanwhile (another one re-ran the run,
            # its session RUNNING again) writes none of them
            with self.peers.store.transaction():
                refused = self.in_flight.fenced(failure.run_id)
                if refused == "claim_lost":
                    # the run is another worker's now: its failure is not this process's
                    logger.bind(
                        task_id=failure.task_id, run_id=failure.run_id, reason=refused
                    ).warning(
                        "agent failure not handled: the run's claim was taken from this process"
                    )
                    return lambda: undecided
                case = decide(self.peers, failure)
                self._record_failure(case)
            self._bookkeeping(case)
        return lambda: self._dispatch(case)

    def _record_failure(self, case: FailureCase) -> None:
        """The failure's states, in the fenced transaction: the session's (Office sessions
        fail; a kanban session stays recoverable), its last error, and a kanban task's REVIEW
        for a person to look at."""
        host = self.peers
        failure = case.failure
        assert failure.session_id is not None
        task = case.found
        office = case.owner is not None
        # 1. session state: Office sessions fail; a kanban session stays recoverable
        host.sessions.set_state(
            failure.session_id,
            "FAILED" if office else "WAITING_FOR_INPUT",
            error=failure.error_message or "agent failed",
        )
        host.sessions.record_effect(
            failure.session_id,
            last_agent_error={
                "message": failure.error_message or "agent failed",
                "route": failure.route,
            },
        )
        # 2. review state: a kanban task goes to REVIEW for a human to look at
        if task is not None and not office and not failure.user_initiated:
            host.tasks.set_state(task.id, "REVIEW")

    def _bookkeeping(self, case: FailureCase) -> None:
        host = self.peers
        failure = case.failure
        assert failure.session_id is not None
        task = case.found
        # 3. a completion signal the agent gave before failing is honoured first
        session = host.sessions.get(failure.session_id)
        signal = session.metadata.get("pending_step_signal")
        if task is not None and signal and signal == task.workflow_step_id:
            host.sessions.record_effect(failure.session_id, pending_step_signal=None)
            _reconcile_signal(host, task.id, failure)
        # 4. cleanup, launched and not awaited
        turn = self.in_flight.turns.get(failure.session_id)
        if turn is not None and turn.proc is not None:
            threading.Thread(target=turn.proc.kill, daemon=True).start()

    def _dispatch(self, case: FailureCase) -> FailureCase:
        failure = case.failure
        decided = case
        failed_at = case.found.workflow_step_id if case.found is not None else None

        def core_dispatch() -> None:
            nonlocal decided
            decided = dispatch_case(self.peers, case)

        def left_for_a_person() -> None:
            if failure.user_initiated or failed_at is None:
                return  # the person who stopped it knows; a task gone needs no one
            self.peers.tasks.wait_after_failure(
                failure.task_id,
                failed_at,
                run_id=failure.run_id,
                session_id=failure.session_id,
                error=failure.error_message or "agent failed",
            )

        # Each in its own guard: a failing dispatch never keeps plugins from observing, and the
        # plugins observe the case as the dispatch left it (the task as it stands now).
        for step in (
            core_dispatch,
            lambda: self.peers.bundle.registry.hooks.agent_failed(self.peers, failure, decided),
            left_for_a_person,
        ):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - a failing callback must not take the host down
                logger.bind(
                    task_id=failure.task_id,
                    session_id=failure.session_id,
                    cause=f"{type(exc).__name__}: {exc}",
                ).opt(exception=exc).error("on_agent_error dispatch raised; recovered")
        return decided


def _reconcile_signal(host: AgentPort, task_id: str, failure: AgentFailure) -> None:
    """Apply the completion signal the agent gave before failing. A failure applying it (a
    move_to_next from the last step, an entry record that could not be written) is logged and
    swallowed: the cleanup and the on_agent_error dispatch still run (AC-A1, AC-A3)."""
    try:
        # an action failing returns a failed result the engine has already logged
        host.engine.handle_trigger(task_id, "on_turn_complete", session_id=failure.session_id)
    except Exception as exc:  # noqa: BLE001 - the failure's own handling must go on
        logger.bind(
            task_id=task_id,
            session_id=failure.session_id,
            route=failure.route,
            cause=f"{type(exc).__name__}: {exc}",
        ).error("the agent's completion signal could not be applied; handling the failure anyway")
