"""Office's durable executors. Each runs behind a ledger marker (see core.entry).

They act only through the host's services, and the runs they enqueue carry the key the
context builds (entry identity + position + agent + canonical config), so a replayed entry
enqueues nothing twice while a re-entry, or a second declaration, enqueues afresh.
"""

from __future__ import annotations

import json
from typing import Any

from office_plugin.kinds import FanOutConfig, QueueRunConfig, SeatConfig
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
    """One DELETE over (task, step), in the transaction that also writes the done marker."""
    removed = ctx.services.decisions.clear(ctx.uow, ctx.task.id, ctx.step.id)
    fault_point("clear_decisions.before_commit")
    ctx.logger.bind(removed=removed).debug("decisions cleared")
    return Outcome.done()


def _reason(config_reason: str | None, trigger: str) -> str:
    return config_reason or trigger or "queue_run"


def queue_run_for_each_participant(ctx: ActionContext, config: FanOutConfig) -> Outcome:
    """One run per distinct matching seat; every seat is attempted whatever fails."""
    reason = _reason(config.reason, ctx.trigger)
    canonical = {"role": config.role, "reason": reason, "payload": config.payload}
    log = ctx.logger.bind(role=config.role)
    enqueued = suppressed = 0
    failures: list[str] = []
    # One unit of work for the read and every enqueue: the set is read once, and the runs
    # commit together (each seat's failure is still isolated and recorded).
    with ctx.services.store.transaction():
        seats = ctx.services.participants.fan_out_seats(ctx.task.id, ctx.step.id, config.role)
        for seat in seats:
            cause = _enqueue_for_seat(ctx, seat, reason, config.payload, canonical)
            if isinstance(cause, str):
                failures.append(cause)
                log.bind(
                    participant_id=seat.id, agent_profile_id=seat.agent_profile_id, cause=cause
                ).error("fan-out could not queue a run for a participant")
                continue
            enqueued += 1
            suppressed += int(cause)
    if not seats:
        log.warning("no participant matches the fan-out role; no runs queued")
    log.bind(matching=len(seats), enqueued=enqueued, suppressed=suppressed).info("fan-out finished")
    if failures:
        return Outcome.failed(
            json.dumps(
                {"attempted": len(seats), "failed": len(failures), "first_cause": failures[0]}
            )
        )
    return Outcome.done()


def _enqueue_for_seat(
    ctx: ActionContext,
    seat: Participant,
    reason: str,
    payload: Any,
    canonical: dict[str, Any],
) -> str | bool:
    """The failure cause, or whether the enqueue was idempotency-suppressed."""
    if not seat.agent_profile_id:
        return "participant has no agent profile"
    try:
        with ctx.services.store.isolated():
            result = ctx.services.runs.enqueue(
                RunRequest(
                    agent_profile_id=seat.agent_profile_id,
                    task_id=ctx.task.id,
                    workflow_step_id=ctx.step.id,
                    reason=reason,
                    payload=payload,
                    idempotency_key=ctx.idempotency_key(seat.agent_profile_id, canonical),
                    coalesce_exempt=ctx.entry_id is not None,
                )
            )
    except Exception as exc:  # noqa: BLE001 - each seat's failure is recorded, then the next
        return f"{type(exc).__name__}: {exc}"
    return bool(result.suppressed)


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
    canonical = {
        "kind": "queue_run",
        "target": config.target,
        "task_id": config.task_id,
        "reason": reason,
        "payload": config.payload,
    }
    for agent in agents:
        host.runs.enqueue(
            RunRequest(
                agent_profile_id=agent,
                task_id=task.id,
                workflow_step_id=step_id,
                reason=reason,
                payload=config.payload,
                idempotency_key=ctx.idempotency_key(agent, canonical),
                coalesce_exempt=ctx.entry_id is not None,
            )
        )
    ctx.logger.bind(target=config.target, enqueued=len(agents)).debug("queue_run done")
    return Outcome.done()


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
