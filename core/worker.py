"""The runs worker: claim queued runs, run their agents, finish the runs.

Any number of workers, in any number of processes on any number of machines, share the queue.
A claim is one statement (`core.runs.claim_next`): the oldest queued run whose agent is below
its profile's `max_concurrent_sessions` becomes claimed by this worker's epoch. A run left
claimed by a dead epoch (its worker was killed) goes back to the queue the next time any
worker looks, decided by the liveness lock, never by a timeout; one that has died with its
worker `max_attempts` times is marked `dead` instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

import attrs

from core import faults, feedback, runs
from core.logs import logger
from core.model import Run
from core.prompts import build_prompt
from core.runtime.runtime import TurnOutcome, profile_session
from core.store import tables as t

if TYPE_CHECKING:
    from core.runtime.runtime import RuntimePeers

R = t.runs
KILL_GRACE_S = 10.0


@attrs.frozen
class WorkerSummary:
    claimed: int = 0
    finished: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"claimed": self.claimed, "finished": self.finished, "failed": self.failed}


def requeue_orphans(host: RuntimePeers) -> runs.Requeued:
    """Runs claimed by dead epochs go back to the queue (or end `dead`); says what it did."""
    with host.store.transaction() as uow:
        found = runs.requeue_dead(uow)
    for run in found.requeued:
        _run_log(run).warning("run re-queued: the worker that claimed it is gone")
    for run in found.dead:
        _run_log(run).error(
            "run is dead: its worker died during every attempt; it is not retried again"
        )
    return found


def _run_log(run: Run) -> Any:
    return logger.bind(
        run_id=run.id,
        agent_profile_id=run.agent_profile_id,
        task_id=run.task_id,
        attempts=run.attempts,
        max_attempts=run.max_attempts,
    )


def claim_next(host: RuntimePeers) -> Run | None:
    """Claim the oldest queued run whose agent has room; None when there is nothing to take."""
    epoch = host.live_epoch()
    with host.store.transaction() as uow:
        return runs.claim_next(uow, epoch)


def finish(host: RuntimePeers, run: Run, outcome: TurnOutcome) -> None:
    """End the run under the epoch that claimed it. When that epoch was declared dead
    meanwhile (this process fenced itself), the run was re-queued and is not ours to end."""
    epoch = run.claimed_epoch or host.live_epoch()
    with host.store.transaction() as uow:
        ended = runs.release(
            uow,
            run,
            epoch,
            ok=outcome.ok,
            session_id=outcome.session_id or None,
            error=outcome.error,
        )
    if not ended:
        logger.bind(run_id=run.id, epoch=epoch).warning(
            "run not finished: its claim was given up after this process was declared dead"
        )


def prompt_for(host: RuntimePeers, run: Run) -> str:
    """The run's prompt: the workflow and step prompts with the task's description, then the
    verdicts and comments given since the agent's last turn on the task (core.feedback; none
    on a first run), then the run's message."""
    task = host.tasks.get(run.task_id) if run.task_id else None
    if task is None or run.workflow_step_id is None:
        return str((run.payload or {}).get("message", ""))
    workflow, step = host.workflows.step_by_id(run.workflow_step_id)
    text = build_prompt(workflow.prompt, step.prompt, task.description)
    given = feedback.since_last_turn(host, run)
    if given is not None:
        names = {s.id: s.name for s in workflow.steps}
        text = f"{text}\n\n{feedback.block(given, names)}"
    message = (run.payload or {}).get("message")
    return f"{text}\n\n{message}" if message else text


def execute(host: RuntimePeers, run: Run) -> TurnOutcome:
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
                if message is None:
                    # The turn that was running when the message came delivered it already.
                    log.bind(session_id=session.id).info("run had no message left to deliver")
                    outcome = TurnOutcome(session.id, ok=True)
                    return outcome
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
    host: RuntimePeers,
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
    try:
        return _work(host, once, max_runs, concurrency, stop, progress, idle_wait)
    finally:
        host.runtime.close()


def _work(
    host: RuntimePeers,
    once: bool,
    max_runs: int | None,
    concurrency: int,
    stop: threading.Event,
    progress: Callable[[str, Run, TurnOutcome | None], None] | None,
    idle_wait: float,
) -> WorkerSummary:
    claimed = finished = failed = 0
    running: dict[Future[TurnOutcome], Run] = {}
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="run") as pool:
        while True:
            if not stop.is_set() and len(running) < concurrency:
                requeue_orphans(host)  # "the next time any worker looks"
            while (
                not stop.is_set()
                and len(running) < concurrency
                and (max_runs is None or claimed < max_runs)
            ):
                run = claim_next(host)
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
