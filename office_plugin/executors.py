"""Office's durable executors. Each runs behind a ledger marker (see core.entry).

They act only through the host's services, and the runs they enqueue carry the key the
context builds (entry identity + position + agent + canonical config), so a replayed entry
enqueues nothing twice while a re-entry, or a second declaration, enqueues afresh.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from office_plugin.configs import FanOutConfig, QueueRunConfig, SeatConfig
from plugins.api import (
    ActionContext,
    ActionFailed,
    LanewayError,
    Outcome,
    Participant,
    RunRequest,
    fault_point,
)


def clear_decisions(ctx: ActionContext, _config: None) -> Outcome:
    """One UPDATE over (task, step) stamping the round cleared (kept for `decision list
    --all`, no longer counted), in the transaction that also writes the done marker."""
    removed = ctx.services.decisions.clear(ctx.uow, ctx.task.id, ctx.step.id)
    fault_point("clear_decisions.before_commit")
    ctx.logger.bind(removed=removed).debug("decisions cleared")
    return Outcome.done()


def _reason(config_reason: str | None, trigger: str) -> str:
    return config_reason or trigger or "queue_run"


def queue_run_for_each_participant(ctx: ActionContext, config: FanOutConfig) -> Outcome:
    """One run per distinct matching seat; every seat is attempted whatever fails.

    A transactional kind: the seats are read, the runs inserted and the done marker written in
    the one transaction of the claim (`ctx.uow`), so the fan-out happens exactly once - its
    runs and its marker commit together or not at all. Each seat is one conditional insert
    (`core.runs`), and its failure is still isolated and recorded: where a failed statement
    aborts the whole transaction (PostgreSQL), the fan-out runs under one savepoint and, only
    when a seat fails there, again seat by seat under a savepoint each.
    """
    reason = _reason(config.reason, ctx.trigger)
    canonical = {"role": config.role, "reason": reason, "payload": config.payload}
    log = ctx.logger.bind(role=config.role)
    store = ctx.services.store
    with store.transaction():  # ctx.uow on entry; a transaction of its own on other triggers
        seats = ctx.services.participants.fan_out_seats(ctx.task.id, ctx.step.id, config.role)
        try:
            with store.isolated():
                tally = _fan_out(ctx, seats, reason, config.payload, canonical)
        except _SeatAborted as aborted:
            # the seats before it are undone with the savepoint and done again; the failed
            # one is recorded, not retried (as a seat failing under its own savepoint is)
            tally = _fan_out(ctx, seats, reason, config.payload, canonical, aborted)
        fault_point("fan_out.before_commit")
    enqueued, suppressed, failures = tally
    for seat, cause in failures:
        log.bind(participant_id=seat.id, agent_profile_id=seat.agent_profile_id, cause=cause).error(
            "fan-out could not queue a run for a participant"
        )
    if not seats:
        log.warning("no participant matches the fan-out role; no runs queued")
    log.bind(matching=len(seats), enqueued=enqueued, suppressed=suppressed).info("fan-out finished")
    if failures:
        return Outcome.failed(
            json.dumps(
                {"attempted": len(seats), "failed": len(failures), "first_cause": failures[0][1]}
            )
        )
    return Outcome.done()


class _SeatAborted(Exception):
    """A seat failed where the failure aborts the transaction: undo to the fan-out's savepoint
    and go seat by seat."""

    def __init__(self, seat: Participant, cause: str) -> None:
        super().__init__(cause)
        self.seat = seat
        self.cause = cause


def _fan_out(
    ctx: ActionContext,
    seats: list[Participant],
    reason: str,
    payload: Any,
    canonical: dict[str, Any],
    aborted: _SeatAborted | None = None,
) -> tuple[int, int, list[tuple[Participant, str]]]:
    """(enqueued, suppressed, [(seat, cause)]). The first pass (`aborted` None) runs every
    seat without a savepoint, and a seat's exception raises `_SeatAborted` where the database
    cannot go on after it; the second runs each seat isolated (a savepoint where the database
    needs one), and records the seat that aborted the first pass without retrying it."""
    store = ctx.services.store
    first_pass = aborted is None
    undo_all = first_pass and not store.is_sqlite
    enqueued = suppressed = 0
    failures: list[tuple[Participant, str]] = []
    key_for = ctx.idempotency_keyer(canonical)  # one digest per action, not per seat
    exempt = ctx.entry_id is not None
    for seat in seats:
        if not seat.agent_profile_id:
            failures.append((seat, "participant has no agent profile"))
            continue
        if not ctx.wakes(seat.agent_profile_id):
            continue  # the agent whose own comment fired this is not woken by it
        if aborted is not None and seat is aborted.seat:
            failures.append((seat, aborted.cause))
            continue
        request = RunRequest(
            agent_profile_id=seat.agent_profile_id,
            task_id=ctx.task.id,
            workflow_step_id=ctx.step.id,
            reason=reason,
            payload=payload,
            idempotency_key=key_for(seat.agent_profile_id),
            coalesce_exempt=exempt,
            entry_id=ctx.entry_id,
        )
        try:
            if first_pass:
                result = ctx.services.runs.enqueue(request)
            else:
                with store.isolated():
                    result = ctx.services.runs.enqueue(request)
        except Exception as exc:  # each seat's failure is recorded, then the next
            cause = f"{type(exc).__name__}: {exc}"
            if undo_all:
                raise _SeatAborted(seat, cause) from exc
            failures.append((seat, cause))
            continue
        enqueued += 1
        suppressed += int(result.suppressed)
    return enqueued, suppressed, failures


def queue_run(ctx: ActionContext, config: QueueRunConfig) -> Outcome:
    """One run per resolved target agent; the first enqueue error fails the action."""
    host = ctx.services
    reason = _reason(config.reason, ctx.trigger)
    try:
        task = ctx.task if config.task_id == "this" else host.tasks.get(config.task_id)
        step_id = ctx.step.id if task.id == ctx.task.id else task.workflow_step_id
        if not step_id:
            raise ActionFailed(f"target task {task.id} stands at no step")
        agents = host.runs.resolve_target(config.target, task, step_id)
    except LanewayError as exc:
        raise ActionFailed(str(exc)) from None
    if task.id == ctx.task.id:
        # the agent whose own comment fired this is not woken by it (it would loop for ever)
        agents = [a for a in agents if ctx.wakes(a)]
    canonical = {
        "kind": "queue_run",
        "target": config.target,
        "task_id": config.task_id,
        "reason": reason,
        "payload": config.payload,
    }
    key_for = ctx.idempotency_keyer(canonical)
    for agent in agents:
        host.runs.enqueue(
            RunRequest(
                agent_profile_id=agent,
                task_id=task.id,
                workflow_step_id=step_id,
                reason=reason,
                payload=_run_payload(ctx.payload, config.payload),
                idempotency_key=key_for(agent),
                coalesce_exempt=ctx.entry_id is not None,
                # a run for this task's entry ends with that entry; one for another task does not
                entry_id=ctx.entry_id if task.id == ctx.task.id else None,
            )
        )
    ctx.logger.bind(target=config.target, enqueued=len(agents)).debug("queue_run done")
    return Outcome.done()


def _run_payload(
    fired: Mapping[str, Any] | None, declared: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """The run's payload: the trigger's (a comment's id, the children's summaries, the
    budget's percentage; its `message` reaches the prompt), the action's keys winning, as
    the reference merges them. Nothing at all stays None."""
    merged = {**(fired or {}), **(declared or {})}
    return merged or None


def run_code_review(ctx: ActionContext, agent_profile_id: str | None) -> Outcome:
    """Start a review pass. A failure to start is logged and never fails the entry."""
    try:
        review_id = ctx.services.runs.start_review(ctx.task.id, ctx.step.id, agent_profile_id)
    except Exception as exc:  # noqa: BLE001 - the reference logs and carries on, so do we
        ctx.logger.bind(cause=f"{type(exc).__name__}: {exc}").error(
            "code review could not be started; the entry continues"
        )
        return Outcome.done(cause="review not started")
    ctx.logger.bind(review_id=review_id).info("code review started")
    return Outcome.done()


def ensure_participant_seat(ctx: ActionContext, config: SeatConfig) -> Outcome:
    """Upsert the task's own seat at this step, before a later fan-out reads the slate."""
    host = ctx.services
    try:
        agent = host.profiles.get(config.agent_profile_id)
    except LanewayError as exc:
        raise ActionFailed(str(exc)) from None
    host.participants.ensure_task_seat(
        ctx.task.id, ctx.step.id, config.role, agent.id, config.decision_required
    )
    return Outcome.done()
