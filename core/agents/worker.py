"""The runs worker: claim queued runs, run their agents, finish the runs.

Any number of workers, in any number of processes on any number of machines, share the queue.
A claim is one statement (`core.runs.claim_next`): the oldest queued run whose agent is below
its profile's `max_concurrent_sessions` becomes claimed by this worker's epoch. A run left
claimed by a dead epoch (its worker was killed) goes back to the queue the next time any
worker looks, decided by the liveness lock, never by a timeout; one that has died with its
worker `max_attempts` times is marked `dead` instead.

Stopping: `runs cancel` marks a claimed run's row; the worker running it polls that row while
the turn runs (`CancelWatch`) and stops the turn, and the run ends `cancelled`. A queued run
whose task has left the run's step by the time it is claimed is cancelled (`step_left`)
without launching its agent. A turn a stopping worker kills goes back to the queue.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import attrs
import sqlalchemy as sa

from core import faults, hosts, runs
from core.agents import watchdog_link
from core.agents.session import profile_session, prompt_for
from core.agents.values import TurnOutcome
from core.errors import NotFound
from core.logs import logger
from core.model import Run, Task
from core.services.sessions import IN_DELIVERY
from core.store.database import database_away

if TYPE_CHECKING:
    from core.agents.session import AgentHost

KILL_GRACE_S = 10.0
CANCEL_POLL_S = 0.5
"""How often a running run's row is read for a cancel request (from any process)."""
CONVERSATION_SWEEP_S = 1.0
"""How often a worker asks which of the ACP conversations it keeps belong to tasks the board is
done with (one read, none while it keeps none)."""
ORPHAN_SCAN_S = 0.5
"""While claims keep finding work, runs of dead epochs are looked for at most this often (a
worker that finds the queue empty looks again before its next claim): a scan per claim was a
transaction per run, and four busy workers scanned each other's claims four times over."""


@attrs.frozen
class WorkerSummary:
    claimed: int = 0
    finished: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"claimed": self.claimed, "finished": self.finished, "failed": self.failed}


def requeue_orphans(host: AgentHost) -> runs.Requeued:
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


CLAIM_RACES: Final = 20
"""Claims tried in a row, each lost to another worker claiming a run of the same session
(PostgreSQL: `runs.claim_next`), before this pass takes nothing; the next pass claims again."""


def claim_next(host: AgentHost, profiles: Sequence[str] | None = None) -> Run | None:
    """Claim the oldest queued run whose agent has room and that this machine may run (of
    `profiles`, agent profile ids, when given); None when there is nothing to take."""
    epoch = host.live_epoch()
    for _race in range(CLAIM_RACES):
        try:
            with host.store.transaction() as uow:
                return runs.claim_next(uow, epoch, hosts.name(), profiles)
        except sa.exc.IntegrityError as exc:
            if not runs.lost_session_race(exc):
                raise
            # another worker claimed a run of the same session first: claim again, past it
            logger.bind(epoch=epoch).debug("claim lost a race for a session; claiming again")
    return None


def finish(host: AgentHost, run: Run, outcome: TurnOutcome) -> bool:
    """End the run under the epoch that claimed it; whether it was ended here. When that epoch
    was declared dead meanwhile (this process fenced itself), the run was re-queued and is not
    ours to end: one WARNING says so, the run's last record in this process (with the turn's
    `ok`), and no "run finished" follows it.

    A turn this worker's shutdown stopped goes back to the queue; one that did not end well
    while a cancel was requested (the turn stopped, or its task deleted under it) ends
    `cancelled`."""
    epoch = run.claimed_epoch or host.live_epoch()
    ended: bool | None = None
    if not (outcome.cancelled and outcome.stopped == "fenced"):
        ended = _while_away(host, run, epoch, lambda: _end(host, run, outcome, epoch))
    if ended:
        return True
    log = logger.bind(
        run_id=run.id, epoch=epoch, reason="claim_lost", ok=outcome.ok, error=outcome.error
    )
    if ended is None:
        # the claim's epoch is dead: the run is re-queued by whoever finds it so (this
        # process included, under its new epoch), and nothing of this turn's is written
        log.warning(
            "run given up: this worker lost the liveness lock it claimed the run under; "
            "the run goes back to the queue"
        )
    else:
        log.warning("run not finished: its claim was given up after this process was declared dead")
    return False


def _while_away(host: AgentHost, run: Run, epoch: str, write: Callable[[], bool]) -> bool | None:
    """`write()`, tried again while the database is away (a restart, a lock held past
    busy_timeout, a full disk: `database_away`), with one WARNING for the wait and a backoff:
    a turn that ended while the database was away is recorded when it comes back. None when
    this process lost the claim's epoch meanwhile: the run is not ours to end any more."""
    delay, warned = AWAY_FIRST_S, False
    while True:
        try:
            return write()
        except Exception as exc:
            if not database_away(exc):
                raise
            if not warned:
                warned = True
                logger.bind(run_id=run.id, cause=_one_line(exc)).warning(
                    "database unavailable; the run's end is recorded when it is back"
                )
        time.sleep(delay)
        delay = min(delay * 2, AWAY_MAX_S)
        if host.store.liveness.own() != epoch:
            return None  # the caller says so


def _one_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines() or [type(orig).__name__]
    return f"{type(orig).__name__}: {lines[0]}"


def _end(host: AgentHost, run: Run, outcome: TurnOutcome, epoch: str) -> bool:
    with host.store.transaction() as uow:
        if outcome.cancelled and outcome.stopped in ("shutdown", "db_away"):
            ended = runs.give_back(uow, run, epoch)
        elif (
            outcome.ok
            and not outcome.cancelled
            and runs.release(
                uow,
                run,
                epoch,
                ok=True,
                session_id=outcome.session_id or None,
                error=outcome.error,
                entry_current=True,
            )
        ):
            ended = True  # the common end: claimed under `epoch`, entry current, one statement
        elif runs.fence(uow, run.id, epoch) == "superseded":
            # its round is over: it ends cancelled, whatever its agent said (newer entries win)
            runs.note_cancel(uow, run.id, "superseded", keep_earlier=True)
            ended = runs.release(uow, run, epoch, ok=False, error=outcome.error, cancelled=True)
        else:
            wanted = not outcome.ok and runs.cancel_requested(uow.conn, run.id) is not None
            ended = runs.release(
                uow,
                run,
                epoch,
                ok=outcome.ok,
                session_id=outcome.session_id or None,
                error=outcome.error,
                cancelled=outcome.cancelled or wanted,
            )
    return ended


class CancelWatch:
    """While runs' turns last: reads their rows every `CANCEL_POLL_S`, all of them in one
    statement, and once someone asked to cancel one (from any process), has the runtime stop
    its turn (again at each poll, until it ends: the turn may not have reached its agent yet).
    One per worker, its thread started with the first run watched: a thread and a read per run
    cost every run a thread's start and join."""

    def __init__(self, host: AgentHost, poll: float = CANCEL_POLL_S) -> None:
        self._host = host
        self._poll = poll
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self.requested: dict[str, str] = {}
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self, run: Run) -> Iterator[None]:
        with self._lock:
            self._runs[run.id] = run
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="laneway-cancel", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._runs.pop(run.id, None)
                self.requested.pop(run.id, None)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._stop.wait(self._poll):
            with self._lock:
                unasked = [r for r in self._runs if r not in self.requested]
            if unasked:
                try:
                    with self._host.store.read() as conn:
                        found = runs.cancels_requested(conn, unasked)
                except Exception as exc:  # noqa: BLE001 - a failed read is tried again next poll
                    logger.bind(run_ids=unasked, cause=str(exc)).warning(
                        "cancel watch could not read the runs"
                    )
                    found = {}
                with self._lock:
                    for run_id, reason in found.items():
                        run = self._runs.get(run_id)
                        if run is None:
                            continue  # its turn ended meanwhile
                        self.requested[run_id] = reason
                        logger.bind(run_id=run_id, task_id=run.task_id, reason=reason).info(
                            "run cancel requested; stopping its turn"
                        )
            with self._lock:
                stopping = [r for r in self.requested if r in self._runs]
            for run_id in stopping:
                self._host.runtime.stop_run(run_id)


def _vacated(host: AgentHost, run: Run, task: Task) -> str | None:
    """Why the run's turn would be for a round that is over, or None: `step_left` when its
    task is no longer at the run's step (moved on, or archived); `superseded` when the entry
    that queued it is no longer the task's current entry of the step (the task left and came
    back: newer entries win, for runs as for markers). The run is cancelled with that reason.
    A person's message is for the session, wherever the card stands, and is delivered all
    the same."""
    if run.workflow_step_id is None or run.reason == "user_message":
        return None
    if task.workflow_step_id != run.workflow_step_id or task.archived_at is not None:
        return "step_left"
    if run.entry_id is None:
        return None  # queued by no entry: nothing can supersede it
    with host.store.read() as conn:
        return "superseded" if runs.superseded(conn, run) else None


_WHY_VACATED = {
    "step_left": ("the task has left the run's step", "its task has left the run's step"),
    "superseded": (
        "the entry that queued the run is superseded",
        "the step entry that queued it is superseded by a newer one",
    ),
}


def execute(host: AgentHost, run: Run, watch: CancelWatch | None = None) -> TurnOutcome:
    """Launch the run's agent on its task's session for that agent and wait for the turn.
    `watch`: the worker's CancelWatch (without one, the run gets one of its own)."""
    faults.reach("worker.after_claim")
    # its claim followed the board a moment ago: the run's own writes and reads skip the
    # board-version read until its agent starts, and again from its agent's end
    with host.store.keeping_board():
        outcome = _execute(host, run, watch)
    deliver_queued(host)
    return outcome


def deliver_queued(host: AgentHost) -> None:
    """Deliver the triggers this process's commits put in the outbox (an `on_budget_alert` the
    run's usage report crossed, the parent's `on_children_completed` its move completed), now
    that the run's own commit is made: on every path a run ends by (`worker --once`, a
    shutdown), not at the next scheduler pass. Never fails the run: a delivery left undone
    stays in the outbox for the next pass."""
    queued = host.store.triggers_queued
    if not queued.is_set():
        return
    queued.clear()  # before the drain: a trigger queued while it runs sets it again
    try:
        host.triggers.drain()
    except Exception as exc:  # noqa: BLE001 - the outbox keeps it; the scheduler delivers it
        logger.bind(cause=f"{type(exc).__name__}: {exc}").opt(exception=exc).error(
            "queued triggers not delivered after the run; the next scheduler pass delivers them"
        )


def _execute(host: AgentHost, run: Run, watch: CancelWatch | None) -> TurnOutcome:
    log = logger.bind(
        run_id=run.id, task_id=run.task_id, agent_profile_id=run.agent_profile_id, reason=run.reason
    )
    outcome = TurnOutcome("", ok=False, error="the run names no task")
    try:
        # the run's reads before its agent starts (task, session, feedback) share one
        # connection and transaction: a write among them (a session opened) ends it
        with host.store.reads_together():
            # read once: whether the run's round is over, its session and its prompt need it
            task = host.tasks.get(run.task_id) if run.task_id is not None else None
            vacated = _vacated(host, run, task) if task is not None else None
            if vacated is not None:
                with host.store.transaction() as uow:
                    runs.note_cancel(uow, run.id, vacated)
                error, why = _WHY_VACATED[vacated]
                log.bind(step_id=run.workflow_step_id, cancel_reason=vacated).info(
                    f"run cancelled: {why}; no agent launched"
                )
                outcome = TurnOutcome("", ok=False, error=error, cancelled=True)
                return outcome
            if task is not None:
                session = profile_session(host, task, run.agent_profile_id)
                message = None
                held = session.metadata.get(IN_DELIVERY)
                held_by = held.get("run_id") if isinstance(held, dict) else None
                if held_by is not None and held_by in (run.id, run.retry_of):
                    # this run is executed again (its worker died, a shutdown stopped it) or
                    # retries one (a person's Retry) that was delivering a message: that
                    # message again
                    message = host.sessions.redeliver(session.id, run.id, held_by)
                if message is None and run.reason == "user_message":
                    message = host.sessions.pop_queued_message(session.id, run.id)
                    if message is None:
                        # The turn that was running when the message came delivered it already.
                        log.bind(session_id=session.id).info("run had no message left to deliver")
                        outcome = TurnOutcome(session.id, ok=True)
                        return outcome
                if message is not None:
                    host.turns.start_internal(session.id)
                prompt = message if message is not None else prompt_for(host, run, task)
        if task is not None:
            log.bind(session_id=session.id).info("run started")
            watcher = watch if watch is not None else CancelWatch(host)
            try:
                with watcher.watching(run):
                    outcome = host.runtime.run_turn(
                        session.id,
                        prompt,
                        run_id=run.id,
                        reason=run.reason,
                        step_id=run.workflow_step_id,
                        # as read just now (a delivered message changed the session's: read again)
                        session=session if message is None else None,
                        task=task,
                    )
            finally:
                if watch is None:
                    watcher.close()
    except Exception as exc:  # noqa: BLE001 - the run is finished as failed, never left claimed
        if database_away(exc):
            # not the agent's failure: the run goes back to the queue once the database is
            # back (never silently failed), and no on_agent_error runs for it
            outcome = TurnOutcome(
                "", ok=False, error=_one_line(exc), cancelled=True, stopped="db_away"
            )
            log.bind(cause=outcome.error).warning(
                "database unavailable during the run; it goes back to the queue"
            )
        elif (cancel_why := _cancelled_under(host, run, exc)) is not None:
            # its task was deleted (or its run cancelled) while its agent worked: the turn's
            # writes found the session gone. The agent is stopped; the run ends cancelled.
            outcome = TurnOutcome(
                "", ok=False, error="the turn was cancelled", cancelled=True, stopped="cancel"
            )
            log.bind(cancel_reason=cancel_why, cause=_one_line(exc)).info(
                "run cancelled during its turn: its task is gone"
                if cancel_why == "task_deleted"
                else "run cancelled during its turn"
            )
        else:
            outcome = TurnOutcome("", ok=False, error=f"{type(exc).__name__}: {exc}")
            log.bind(cause=outcome.error).opt(exception=exc).error("run could not be executed")
    finally:
        ended = finish(host, run, outcome)
    if ended:  # else finish said why not, once: one outcome per run in the log
        log.bind(ok=outcome.ok, error=outcome.error).info("run finished")
    return outcome


def _cancelled_under(host: AgentHost, run: Run, exc: Exception) -> str | None:
    """The cancel request on `run` that explains `exc` (a NotFound of what its turn wrote to:
    a task deleted under it cancels its runs first), or None: the error is the run's own."""
    if not isinstance(exc, NotFound):
        return None
    try:
        with host.store.read() as conn:
            return runs.cancel_requested(conn, run.id)
    except Exception:  # noqa: BLE001 - unreadable: the error is reported as it is
        return None


def work(
    host: AgentHost,
    *,
    once: bool = True,
    max_runs: int | None = None,
    concurrency: int = 1,
    stop: threading.Event | None = None,
    progress: Callable[[str, Run, TurnOutcome | None], None] | None = None,
    idle_wait: float = 0.5,
    profiles: Sequence[str] | None = None,
) -> WorkerSummary:
    """Claim and execute runs until the queue is empty (`once`) or `stop` is set.

    With `once`, runs that finished runs queue in turn are taken too, until nothing is left
    or `max_runs` were claimed. Stopping claims nothing more and lets running turns end.
    """
    stop = stop or threading.Event()
    # The holder hears of its lock's loss first: its agents stop before another worker can
    # find the epoch dead and take their runs (docs/guarantees.md "Many processes").
    unwatch = host.watch_epoch(host.runtime.stop_fenced)
    unattend = watchdog_link.attend(lambda: after_pause(host))
    try:
        return _work(host, once, max_runs, concurrency, stop, progress, idle_wait, profiles)
    finally:
        unattend()
        unwatch()
        host.runtime.close()


def after_pause(host: AgentHost) -> list[int]:
    """This worker wakes from a pause, its agents still stopped by its watchdog
    (core.agents.watchdog): check the liveness lock first - when it is lost the check fences
    this worker and stops the turns claimed under it - and name the agents of turns whose claim
    is lost, to be killed rather than resumed."""
    try:
        host.live_epoch()
    except Exception as exc:  # noqa: BLE001 - a lost lock's turns are stopped before the re-mint
        logger.bind(cause=f"{type(exc).__name__}: {exc}").warning(
            "after a pause: the liveness lock is lost and no new epoch could be taken yet"
        )
    return host.runtime.fenced_groups()


def _work(
    host: AgentHost,
    once: bool,
    max_runs: int | None,
    concurrency: int,
    stop: threading.Event,
    progress: Callable[[str, Run, TurnOutcome | None], None] | None,
    idle_wait: float,
    profiles: Sequence[str] | None,
) -> WorkerSummary:
    claimed = finished = failed = 0
    running: dict[Future[TurnOutcome], Run] = {}
    away = _Away()
    scanned, starved = -ORPHAN_SCAN_S, True
    swept = time.monotonic()
    watch = CancelWatch(host)
    with (
        contextlib.closing(watch),
        ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="run") as pool,
    ):
        while True:
            try:
                if (
                    not stop.is_set()
                    and len(running) < concurrency
                    and (starved or time.monotonic() - scanned >= ORPHAN_SCAN_S)
                ):
                    requeue_orphans(host)  # "the next time any worker looks"
                    scanned = time.monotonic()
                if time.monotonic() - swept >= CONVERSATION_SWEEP_S:
                    # conversations kept for tasks the board is done with end now, not when
                    # the worker stops (AGENTS.md "Phase 4": `session/close`)
                    swept = time.monotonic()
                    host.runtime.end_finished_conversations()
                while (
                    not stop.is_set()
                    and len(running) < concurrency
                    and (max_runs is None or claimed < max_runs)
                ):
                    run = claim_next(host, profiles)
                    starved = run is None
                    if run is None:
                        break
                    claimed += 1
                    if progress:
                        progress("claimed", run, None)
                    running[pool.submit(execute, host, run, watch)] = run
            except Exception as exc:
                if not database_away(exc):
                    raise
                # waited out, never fatal: the worker claims again once the database is back
                # (under a new epoch, when its lock went with the connection)
                stop.wait(away.wait(exc))
                continue
            away.back()
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
                kind = _kind(outcome)
                finished += int(kind == "finished")
                failed += int(kind == "failed")
                if progress:
                    progress(kind, run, outcome)
    return WorkerSummary(claimed, finished, failed)


AWAY_FIRST_S = 0.2
AWAY_MAX_S = 5.0
"""The backoff while the database is away: from a fifth of a second, doubling, to 5 s."""


class _Away:
    """The worker loop's view of a database outage: one WARNING when it begins, one INFO when
    it ends, and the backoff between tries."""

    def __init__(self) -> None:
        self.delay = 0.0

    def wait(self, exc: BaseException) -> float:
        if not self.delay:
            logger.bind(cause=_one_line(exc)).warning(
                "database unavailable; the worker waits for it and claims again when it is back"
            )
            self.delay = AWAY_FIRST_S
        else:
            self.delay = min(self.delay * 2, AWAY_MAX_S)
        return self.delay

    def back(self) -> None:
        if self.delay:
            logger.info("database available again; the worker claims again")
            self.delay = 0.0


def _kind(outcome: TurnOutcome) -> str:
    """How a run ended, for the summary and the progress lines: a stopped turn is neither
    finished nor failed (`cancelled`, or `requeued` when this worker's shutdown stopped it)."""
    if outcome.ok:
        return "finished"
    if outcome.cancelled:
        return "requeued" if outcome.stopped in ("shutdown", "db_away", "fenced") else "cancelled"
    return "failed"


def _result(future: Future[TurnOutcome], run: Run) -> TurnOutcome:
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - one run's crash never stops the worker
        logger.bind(run_id=run.id, cause=f"{type(exc).__name__}: {exc}").opt(exception=exc).error(
            "run crashed"
        )
        return TurnOutcome("", ok=False, error=f"{type(exc).__name__}: {exc}")
