"""Trigger evaluation: compile a step's actions for a trigger, check guards, pick the first
eligible transition, run the other actions (`core.actions`), and hand the move to the arrival
layer (`core.arrival.move`: the transition's commit, then what follows it).

Rules (the reference system's, kept): actions are walked in declared order; a move is eligible
only while no target is chosen and it is not `requires_approval`; its guards are checked
before it is eligible; the first eligible move whose guards pass wins. Every other action runs
in order, and for every trigger but on_enter the first failing action aborts the evaluation:
no transition happens and the operation id is not marked applied.

An operation id (on_agent_error's) is durable (`core.operations`): claimed before anything
runs, so one delivery of a failure evaluates it whichever process or restart delivers it
again; released when an action fails or the evaluation raises (a redelivery re-runs the list,
AC-C6); marked applied once the actions succeeded and *before* the move, so a move the
transition refuses is not retried (AC-C7): it is reported in the result (`declined`), not
raised, and logged once by whoever refused it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from core import actions, arrival, runaway, structural, transition
from core.actions import aborted as _aborted
from core.actions import bound as _bound
from core.arrival import Arrivals
from core.errors import LanewayError
from core.model import ActionDecl, Step, Task, Workflow
from core.operations import Operations
from core.plugin.kinds import GuardContext, GuardResult
from core.plugin.registry import Registry

if TYPE_CHECKING:
    from loguru import Logger

MOVE_CONFIG_KEYS = frozenset({"step_id", "step_position", "requires_approval", "if"})
TRIGGER_LABELS = {"on_turn_complete": "auto_complete", "on_turn_start": "on_turn_start"}


@attrs.frozen
class TriggerResult:
    transitioned: bool = False
    from_step_id: str | None = None
    to_step_id: str | None = None
    idempotent: bool = False
    abandoned: bool = False
    action_count: int = 0
    failed: bool = False
    """An action failed: the evaluation aborted, nothing moved, the operation stays unmarked."""
    cause: str | None = None
    declined: str | None = None
    """The operation was applied but the transition refused the move (why): not retried."""
    failed_action: str | None = None
    failed_position: int | None = None
    refusals: tuple[tuple[str, str], ...] = ()
    """(guard, reason) for each guarded move a guard kept from being taken."""
    halted: bool = False
    """The runaway-loop limit kept the chosen move from being taken."""

    def as_dict(self, task: Task) -> dict[str, Any]:
        return {
            "task": task,
            "transitioned": self.transitioned,
            "from_step_id": self.from_step_id,
            "to_step_id": self.to_step_id,
            "refusals": [{"guard": g, "reason": r} for g, r in self.refusals],
            "halted": self.halted,
        }


def guards_of(decl: ActionDecl) -> dict[str, Any]:
    """A move's guards: `if: {name: config}`, plus legacy top-level `name: {...}` keys."""
    found: dict[str, Any] = {}
    cond = decl.config.get("if")
    if isinstance(cond, Mapping):
        found.update(cond)
    for key, value in decl.config.items():
        if key not in MOVE_CONFIG_KEYS and isinstance(value, Mapping):
            found[key] = value
    return found


def is_move(registry: Registry, decl: ActionDecl) -> bool:
    """Whether the declared action is a move (its kind says so: `ActionKind.moves`)."""
    registered = registry.kind(decl.kind)
    return registered is not None and registered.kind.moves


class Engine:
    """Trigger evaluation over one registry (a bundle's): cheap to build, so each caller builds
    one from the bundle it read."""

    def __init__(self, arrivals: Arrivals, registry: Registry, operations: Operations) -> None:
        self.arrivals = arrivals
        self.kernel = arrivals.kernel
        self.registry = registry
        self.operations = operations

    # -- public entry points ------------------------------------------------------------------

    def handle_trigger(
        self,
        task_id: str,
        trigger: str,
        *,
        session_id: str | None = None,
        operation_id: str | None = None,
        payload: Mapping[str, Any] | None = None,
        label: str | None = None,
        task: Task | None = None,
        caller_reports: bool = False,
        failure_spends: bool = False,
        fired_by_agent: str | None = None,
    ) -> TriggerResult:
        """Evaluate `trigger` for the task's current step (never on_enter: see core.entry).

        :param operation_id: claimed durably before anything runs; a delivery that does not
            win the claim (applied already, or being evaluated by a live peer) is
            short-circuited (`idempotent`). Released when an action fails, marked applied
            once every action succeeded, before the move.
        :param task: the task as the caller already read it (read once, used throughout).
        :param caller_reports: the caller has warned about actions with no executor and
            records the outcome itself (on_agent_error's dispatch): the engine adds no record
            of its own for those, so each gets exactly one.
        :param failure_spends: an action's failure marks the operation applied instead of
            releasing it: the trigger fails once for it, and is not evaluated again by every
            later delivery (a heartbeat slot: the next slot tries afresh).
        :param fired_by_agent: the agent profile whose own act fired the trigger (a comment
            it wrote): no action wakes it (`ActionContext.wakes`), and its act counts toward
            the runaway-loop limit (a person's comment does not).
        """
        if trigger == "on_enter":
            raise ValueError("on_enter is dispatched by core.entry, not by handle_trigger")
        operations = self.operations
        if operation_id is not None and not operations.claim(operation_id):
            return TriggerResult(idempotent=True)
        try:
            evaluated = self._evaluate(
                task_id,
                trigger,
                operation_id,
                payload,
                session_id,
                task,
                caller_reports,
                fired_by_agent,
            )
        except BaseException:
            if operation_id is not None:
                operations.release(operation_id)
            raise
        if evaluated.result is not None:  # nothing to evaluate, or an action failed
            if operation_id is not None:
                if failure_spends and evaluated.result.failed:
                    operations.mark_applied(operation_id)
                else:
                    operations.release(operation_id)
            return evaluated.result
        if operation_id is not None:
            operations.mark_applied(operation_id)  # AC-C7: before the move, whatever it does
        count, refusals = evaluated.action_count, evaluated.refusals
        target, step, task = evaluated.target, evaluated.step, evaluated.task
        if target is None or step is None or task is None or target.id == step.id:
            return TriggerResult(action_count=count, refusals=refusals)
        try:
            change = arrival.move(
                self.arrivals,
                task.id,
                target.id,
                path="E1",
                label=label or TRIGGER_LABELS.get(trigger, trigger),
            )
        except LanewayError as exc:
            if operation_id is None:
                raise
            if not isinstance(exc, transition.EntryAllocationFailed):  # that one is logged
                _bound(task, step, trigger).bind(
                    to_step_id=target.id, operation_id=operation_id, cause=str(exc)
                ).warning("transition declined; the operation is applied and not retried")
            return TriggerResult(
                from_step_id=step.id, action_count=count, declined=str(exc), refusals=refusals
            )
        return TriggerResult(
            transitioned=change.changed,
            from_step_id=step.id,
            to_step_id=target.id,
            action_count=count,
            refusals=refusals,
            halted=change.halted,
        )

    def _evaluate(
        self,
        task_id: str,
        trigger: str,
        operation_id: str | None,
        payload: Mapping[str, Any] | None,
        session_id: str | None,
        task: Task | None,
        caller_reports: bool = False,
        fired_by_agent: str | None = None,
    ) -> _Evaluated:
        """Guards and non-move actions; `result` is set when the evaluation ends there."""
        if task is None:
            task = self.kernel.read.task(task_id)
        if task.workflow_id is None or task.workflow_step_id is None:
            return _Evaluated(TriggerResult())
        workflow = self.kernel.read.workflow(task.workflow_id)
        step = workflow.step(task.workflow_step_id)
        if step is None:
            return _Evaluated(TriggerResult())
        declared = step.actions(trigger)
        log = _bound(task, step, trigger)
        fired = actions.Fired(
            task, step, trigger, log, operation_id, payload, session_id, fired_by_agent
        )
        target: Step | None = None
        warned: set[str] = set()
        refusals: list[tuple[str, str]] = []
        woke: bool | None = None  # whether the runaway-loop limit lets this evaluation wake
        for decl in declared:
            if is_move(self.registry, decl):
                if target is None and self._eligible(
                    decl, task, step, trigger, log, warned, refusals
                ):
                    target = self._resolve_target(workflow, step, decl)
                continue
            if self._wakes_agents(decl) and _counted(trigger, fired_by_agent):
                if woke is None:
                    woke = runaway.wake(self.kernel, task, workflow, step)
                if not woke:
                    log.bind(action_type=decl.kind, position=decl.position).debug(
                        "runaway-loop limit: the action queues no run"
                    )
                    continue
            cause = actions.run(
                self.kernel,
                self.registry,
                decl,
                fired,
                warn_unexecutable=not caller_reports,
            )
            if cause is not None:
                if not caller_reports:
                    _aborted(log, decl, cause)
                failed = TriggerResult(
                    action_count=len(declared),
                    failed=True,
                    cause=cause,
                    failed_action=decl.kind,
                    failed_position=decl.position,
                )
                return _Evaluated(failed)
        return _Evaluated(None, task, step, target, len(declared), tuple(refusals))

    def after_decision(self, task_id: str, step_id: str) -> TriggerResult:
        """Re-evaluate the guarded on_turn_complete moves of the step a decision was made at.

        The first satisfied one is applied by compare-and-set on the task's step: a task that
        has already moved on is not moved again. Non-move actions are never re-run.
        """
        task = self.kernel.read.task(task_id)
        workflow, step = self.kernel.read.step(step_id)
        log = _bound(task, step, "on_turn_complete")
        warned: set[str] = set()
        refusals: list[tuple[str, str]] = []
        for decl in step.actions("on_turn_complete"):
            if not is_move(self.registry, decl) or not guards_of(decl):
                continue
            if not self._eligible(decl, task, step, "on_turn_complete", log, warned, refusals):
                continue
            target = self._resolve_target(workflow, step, decl)
            change = arrival.move(
                self.arrivals,
                task.id,
                target.id,
                path="E1",
                label="auto_complete",
                expected_step_id=step.id,
            )
            return TriggerResult(
                transitioned=change.changed,
                from_step_id=step.id,
                to_step_id=target.id if change.changed else None,
                abandoned=change.abandoned,
                halted=change.halted,
            )
        return TriggerResult(refusals=tuple(refusals))

    def run_exit(self, task: Task, step_id: str) -> None:
        """The on_exit actions of the step a task left; moves there are ignored."""
        actions.run_exit(self.kernel, self.registry, task, step_id)

    # -- pieces ---------------------------------------------------------------------------------

    def _wakes_agents(self, decl: ActionDecl) -> bool:
        """An action whose kind starts or seats agents (`ActionKind.agents`): what a
        trigger-driven run loop is made of."""
        registered = self.registry.kind(decl.kind)
        return registered is not None and registered.kind.agents is not None

    def _eligible(
        self,
        decl: ActionDecl,
        task: Task,
        step: Step,
        trigger: str,
        log: Logger,
        warned: set[str],
        refusals: list[tuple[str, str]] | None = None,
    ) -> bool:
        """Whether a move may be taken; `warned` keeps one warning per guard per evaluation,
        `refusals` collects (guard, reason) for each guard that keeps a move back."""
        if decl.config.get("requires_approval"):
            return False
        for name, config in guards_of(decl).items():
            why = self.registry.unavailable_guard(name)
            if why is not None:
                if name in warned:
                    return False
                warned.add(name)
                log.bind(guard=name, position=decl.position, why=why).warning(
                    "guarded transition not taken: the guard never passes"
                )
                if refusals is not None:
                    refusals.append((name, why))
                return False
            registered = self.registry.guard(name)
            assert registered is not None  # available means declared and enabled
            ctx = GuardContext(task, step, trigger, self.kernel.services, log)
            result = registered.guard.evaluate(ctx, registered.guard.validate(config))
            if not result.satisfied:
                log.bind(guard=name, reason=result.reason, position=decl.position).debug(
                    "guard not satisfied"
                )
                if refusals is not None:
                    refusals.append((name, self._reason_text(decl, step, result)))
                return False
        return True

    def _reason_text(self, decl: ActionDecl, step: Step, result: GuardResult) -> str:
        try:
            target = self._resolve_target(
                self.kernel.read.workflow(step.workflow_id), step, decl
            ).name
        except LanewayError:
            target = ""
        return _reason_text(decl, target, result)

    def _resolve_target(self, workflow: Workflow, step: Step, decl: ActionDecl) -> Step:
        return structural.resolve_target(workflow, step, decl)


@attrs.frozen
class _Evaluated:
    result: TriggerResult | None
    task: Task | None = None
    step: Step | None = None
    target: Step | None = None
    action_count: int = 0
    refusals: tuple[tuple[str, str], ...] = ()


def _reason_text(decl: ActionDecl, target: str, result: GuardResult) -> str:
    """A refusal as a person reads it: the move, the guard's reason and its detail."""
    move = f"{decl.kind} {target}" if target else decl.kind
    text = f"{move}: {result.reason or 'not satisfied'}"
    if result.detail:
        text += " (" + ", ".join(f"{k}={v}" for k, v in result.detail.items()) + ")"
    return text


UNCOUNTED_TRIGGERS = frozenset({"on_heartbeat"})
"""The clock's trigger: its slots bound it, not the runaway-loop limit."""


def _counted(trigger: str, fired_by_agent: str | None) -> bool:
    """Whether a trigger's runs count toward the runaway-loop limit: every trigger a run's own
    work can fire again (a turn's end, an error, an agent's comment, ...), not the clock's,
    and not a comment a person wrote."""
    if trigger in UNCOUNTED_TRIGGERS:
        return False
    return trigger != "on_comment" or fired_by_agent is not None
