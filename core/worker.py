"""The runs worker: claim queued runs, run their agents, finish the runs.

Claiming is a conditional UPDATE (`... WHERE id = ? AND status = 'queued'`): whoever changes
the row owns the run, so two claimers never take one run. A claim records the host's epoch;
a run left `claimed` by an epoch that is not ours belongs to a process that is gone (one owner
per database), so starting a worker puts it back in the queue - decided by identity, not by
a guessed timeout. The oldest queued run goes first, and an agent gets no more claimed runs
than its profile's `max_concurrent_sessions`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

import attrs
import sqlalchemy as sa
from loguru import logger

from core import faults, ids
from core.model import Run
from core.prompts import build_prompt
from core.runtime.runtime import TurnOutcome, profile_session
from core.store import events, rows
from core.store import tables as t

if TYPE_CHECKING:
    from core.host import Host

R = t.runs
KILL_GRACE_S = 10.0


@attrs.frozen
class WorkerSummary:
    claimed: int = 0
    finished: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"claimed": self.claimed, "finished": self.finished, "failed": self.failed}


def requeue_orphans(host: Host) -> int:
    """Runs claimed under another epoch go back to the queue; returns how many."""
    with host.store.transaction() as uow:
        result = uow.conn.execute(
            sa.update(R)
            .where(
                R.c.status == "claimed",
                sa.or_(R.c.claimed_epoch.is_(None), R.c.claimed_epoch != host.epoch),
            )
            .values(status="queued", claimed_at=None, claimed_epoch=None)
            .execution_options(preserve_rowcount=True)
        )
    count = int(result.rowcount)
    if count:
        logger.bind(requeued=count).warning("re-queued runs left claimed by a previous process")
    return count


def claim_next(host: Host, busy_agents: set[str] | None = None) -> Run | None:
    """Claim the oldest queued run whose agent has room; None when there is nothing to take."""
    with host.store.transaction() as uow:
        claimed_per_agent: dict[str, int] = dict(
            uow.conn.execute(
                sa.select(R.c.agent_profile_id, sa.func.count())
                .where(R.c.status == "claimed")
                .group_by(R.c.agent_profile_id)
            ).all()
        )
        limits = {p.id: p.max_concurrent_sessions for p in host.profiles.list()}
        queued = uow.conn.execute(
            sa.select(R.c.id, R.c.agent_profile_id)
            .where(R.c.status == "queued")
            .order_by(R.c.requested_at, R.c.id)
        ).all()
        for run_id, agent in queued:
            if claimed_per_agent.get(agent, 0) >= limits.get(agent, 1):
                continue
            if busy_agents is not None and agent in busy_agents and limits.get(agent, 1) <= 1:
                continue
            taken = uow.conn.execute(
                sa.update(R)
                .where(R.c.id == run_id, R.c.status == "queued")
                .values(status="claimed", claimed_at=ids.now(), claimed_epoch=host.epoch)
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if taken == 1:
                row = uow.conn.execute(sa.select(R).where(R.c.id == run_id)).mappings().one()
                claimed = rows.run(row)
                events.record(
                    uow,
                    "run.started",
                    claimed.task_id,
                    run_id=claimed.id,
                    agent_profile_id=claimed.agent_profile_id,
                )
                return claimed
    return None


def finish(host: Host, run: Run, outcome: TurnOutcome) -> None:
    status = "finished" if outcome.ok else "failed"
    with host.store.transaction() as uow:
        done = uow.conn.execute(
            sa.update(R)
            .where(R.c.id == run.id, R.c.status == "claimed")
            .values(
                status=status,
                finished_at=ids.now(),
                session_id=outcome.session_id or None,
                error_message=outcome.error,
            )
            .execution_options(preserve_rowcount=True)
        ).rowcount
        if done == 1:
            events.record(
                uow,
                f"run.{status}",
                run.task_id,
                run_id=run.id,
                agent_profile_id=run.agent_profile_id,
            )


def prompt_for(host: Host, run: Run) -> str:
    """The run's prompt: the workflow and step prompts with the task's description."""
    task = host.tasks.get(run.task_id) if run.task_id else None
    if task is None or run.workflow_step_id is None:
        return str((run.payload or {}).get("message", ""))
    workflow, step = host.workflows.step_by_id(run.workflow_step_id)
    text = build_prompt(workflow.prompt, step.prompt, task.description)
    message = (run.payload or {}).get("message")
    return f"{text}\n\n{message}" if message else text


def execute(host: Host, run: Run) -> TurnOutcome:
    """Launch the run's agent on its task's session for that agent and wait for the turn."""
    faults.reach("worker.after_claim")
    log = logger.bind(
        run_id=run.id, task_id=run.task_id, agent_profile_id=run.agent_profile_id, reason=run.reason
    )
    outcome = TurnOutcome("", ok=False, error="the run names no task")
    try:
        if run.task_id is not None:
            task = host.tasks.get(run.task_id)
            session = profile_session(host, task, run.agent_profile_id)
            message = None
            if run.reason == "user_message":
                message = host.sessions.pop_queued_message(session.id)
                host.turns.start_internal(session.id)
            prompt = message if message is not None else prompt_for(host, run)
            log.bind(session_id=session.id).info("run started")
            outcome = host.runtime.run_turn(
                session.id, prompt, run_id=run.id, reason=run.reason, step_id=run.workflow_step_id
            )
    except Exception as exc:  # noqa: BLE001 - the run is finished as failed, never left claimed
        outcome = TurnOutcome("", ok=False, error=f"{type(exc).__name__}: {exc}")
        log.bind(cause=outcome.error).opt(exception=exc).error("run could not be executed")
    finally:
        finish(host, run, outcome)
    log.bind(ok=outcome.ok, error=outcome.error).info("run finished")
    return outcome


def work(
    host: Host,
    *,
    once: bool = True,
    max_runs: int | None = None,
    concurrency: int = 1,
    stop: threading.Event | None = None,
    progress: Callable[[str, Run, TurnOutcome | None], None] | None = None,
    idle_wait: float = 0.5,
) -> WorkerSummary:
    """Claim and execute runs until the queue is empty (`once`) or `stop` is set.

    With `once`, runs that finished runs queue in turn are taken too, until nothing is left
    or `max_runs` were claimed. Stopping claims nothing more and lets running turns end.
    """
    stop = stop or threading.Event()
    requeue_orphans(host)
    claimed = finished = failed = 0
    running: dict[Future[TurnOutcome], Run] = {}
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="run") as pool:
        while True:
            while (
                not stop.is_set()
                and len(running) < concurrency
                and (max_runs is None or claimed < max_runs)
            ):
                busy = {r.agent_profile_id for r in running.values()}
                run = claim_next(host, busy)
                if run is None:
                    break
                claimed += 1
                if progress:
                    progress("claimed", run, None)
                running[pool.submit(execute, host, run)] = run
            if not running:
                if once or stop.is_set() or (max_runs is not None and claimed >= max_runs):
                    break
                stop.wait(idle_wait)
                continue
            done, _ = wait(
                list(running), timeout=None if once else idle_wait, return_when=FIRST_COMPLETED
            )
            for future in done:
                run = running.pop(future)
                outcome = _result(future, run)
                finished += int(outcome.ok)
                failed += int(not outcome.ok)
                if progress:
                    progress("finished" if outcome.ok else "failed", run, outcome)
    return WorkerSummary(claimed, finished, failed)


def _result(future: Future[TurnOutcome], run: Run) -> TurnOutcome:
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - one run's crash never stops the worker
        logger.bind(run_id=run.id, cause=f"{type(exc).__name__}: {exc}").opt(exception=exc).error(
            "run crashed"
        )
        return TurnOutcome("", ok=False, error=f"{type(exc).__name__}: {exc}")
