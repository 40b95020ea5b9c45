"""The transition transaction: the only code that changes a task's step.

Every route (engine transition E1, manual move E2, WIP promotion E3, switch_workflow E4,
generic update and task start E5) reaches `move`. In ONE transaction it writes the step fields
(admitting the task, or storing it queued when the step is full), records session history,
and lets the ledger allocate the entry record; then it returns what changed. What follows a
commit (the source step's on_exit, the arrival's session and entry sequence, promotion into
the vacated step) is the arrival layer's (`core.arrival`), above this module.

Not arrivals, by definition: re-issuing a move to the step the task stands on, a queued
placement, creating a task into a step (`core.wip.place_new_task`), detaching a task from its
workflow, and restoring a step from history (`restore_step`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar

import attrs
import sqlalchemy as sa

from core import actors, faults, ids, ledger, outbox, runaway
from core.board import ROW_ID as BOARD_ROW
from core.entry import Arrival  # the value `move` returns, defined beside its consumer
from core.errors import LanewayError, NotFound
from core.kernel import HasKernel, Kernel, kernel_of
from core.logs import logger
from core.model import ACTIVE_SESSION_STATES, Step, Task, Workflow
from core.plugin.registry import Registry
from core.store import events, prepared, rows
from core.store import tables as t
from core.store.database import UnitOfWork
from core.store.prepared import fixed_in, insert_of
from core.store.repository import live_session_id
from core.wip import has_room, next_candidate

TASKS = t.tasks


class EntryAllocationFailed(LanewayError):
    """The entry record could not be written, so the step change was not committed."""

    code: ClassVar[str] = "entry_allocation_failed"


@attrs.frozen
class Change:
    """What `move` did."""

    task: Task
    from_step_id: str | None
    changed: bool
    queued: bool = False
    arrival: Arrival | None = None
    abandoned: bool = False
    """The caller's expected step no longer held (compare-and-set lost); nothing changed."""
    halted: bool = False
    """The runaway-loop limit refused this trigger's move; nothing changed."""
    left: Task | None = None
    """The task as it stood before a committed change (whose on_exit the arrival layer runs)."""


# -- reads inside a unit of work --------------------------------------------------------------


# Statements on the arrival path are built once, here: constructing a Core statement costs more
# than executing a cached one.
_S = t.task_sessions
_B = t.board_settings
_TASK_AND_SESSION = sa.select(
    TASKS,
    sa.select(_S.c.id)
    .where(_S.c.task_id == TASKS.c.id, fixed_in(_S.c.state, tuple(ACTIVE_SESSION_STATES)))
    .order_by(_S.c.is_primary.desc(), _S.c.updated_at.desc(), _S.c.id.desc())
    .limit(1)
    .scalar_subquery()
    .label("live_session_id"),
    # the board's catalogue version, read with the task: `move` follows the board from this
    # statement instead of a read of its own at BEGIN (Store.transaction's on_begin)
    sa.select(_B.c.catalogue_version)
    .where(_B.c.id == BOARD_ROW)
    .scalar_subquery()
    .label("board_version"),
).where(TASKS.c.id == sa.bindparam("task_id"))
# The task row is held until the transition commits (PostgreSQL; SQLite's writers are
# serialised): two processes moving one task are ordered, each seeing the other's result.
_TASK_AND_SESSION = _TASK_AND_SESSION.with_for_update(of=TASKS, key_share=True)
_ADMITTED = {
    "workflow_id": sa.bindparam("b_workflow_id"),
    "workflow_step_id": sa.bindparam("b_step_id"),
    "wip_admitted": True,
    "state": sa.bindparam("b_state"),
    "updated_at": sa.bindparam("b_stamp"),
    "loop_halted_step_id": sa.bindparam("b_halted"),
    "loop_generation": sa.bindparam("b_generation"),
}
_ADMIT = (
    sa.update(TASKS)
    .where(TASKS.c.id == sa.bindparam("b_task_id"))
    .values(**_ADMITTED, queued_for_step_id=None, queued_at=None)
)
# A task that was not queued (the task row is read, and held, in this transaction): its queue
# fields are already empty, and leaving them out of SET spares SQLite rewriting their index.
_ADMIT_UNQUEUED = (
    sa.update(TASKS).where(TASKS.c.id == sa.bindparam("b_task_id")).values(**_ADMITTED)
)


@functools.cache
def _history() -> sa.Insert:
    """The session's step history row (built when first written: a move of a task with no
    session never names its table)."""
    return insert_of(
        t.session_step_history,
        (
            "id",
            "session_id",
            "task_id",
            "from_step_id",
            "to_step_id",
            "trigger",
            "actor_id",
            "created_at",
        ),
    )


def _task_row(uow: UnitOfWork, task_id: str) -> tuple[Task, str | None]:
    """The task as it stands in this transaction, and its live session's id."""
    row = uow.run(_TASK_AND_SESSION, {"task_id": task_id}).mapping()
    if row is None:
        raise NotFound(f"no task {task_id!r}")
    version = row["board_version"]
    uow.store.follow_version(uow.conn, int(version) if version is not None else 0)
    return rows.task(row), row["live_session_id"]


def _state_on_arrival(task: Task, workflow: Workflow, step: Step) -> str:
    terminal = workflow.terminal_step
    if terminal is not None and terminal.id == step.id:
        return "COMPLETED"
    return "TODO" if task.state == "COMPLETED" else task.state


def _write_history(
    uow: UnitOfWork,
    task_id: str,
    session_id: str | None,
    from_step: str | None,
    to_step: str,
    label: str,
    actor: str,
) -> None:
    if session_id is None:
        return
    prepared.defer(
        uow.conn,
        _history(),
        {
            "id": ids.new_id(),
            "session_id": session_id,
            "task_id": task_id,
            "from_step_id": from_step,
            "to_step_id": to_step,
            "trigger": label,
            "actor_id": (actor or actors.current())[:64],
            "created_at": ids.now(),
        },
    )


def _admit(
    registry: Registry,
    uow: UnitOfWork,
    task: Task,
    workflow: Workflow,
    step: Step,
    *,
    path: str,
    label: str,
    actor: str,
    from_step_id: str | None,
    session_id: str | None,
    counted: bool = False,
) -> Arrival:
    """Write an admission and everything that commits with it; return the arrival."""
    stamp = ids.now()
    state = _state_on_arrival(task, workflow, step)
    # the runaway-loop fields ride on the admission itself: a person's move clears the flag
    # and starts a new count generation; any other path writes them back as they were read
    # (the store's one writer connection serialises write transactions)
    halted, generation = runaway.values_after(task, path)
    queued = task.queued_for_step_id is not None or task.queued_at is not None
    # The entry record first: its statement reads back its entry_seq, and a failure of its
    # own is told apart (EntryAllocationFailed). The step fields and the history row after
    # it need no answer, so on PostgreSQL they wait for the transaction's next round trip
    # (`prepared.defer`), at the latest its COMMIT's; all commit together or not at all.
    try:
        entry = ledger.allocate(uow, registry, task.id, step, path)
    except sa.exc.SQLAlchemyError as exc:
        logger.bind(task_id=task.id, step_id=step.id, entry_path=path, cause=str(exc)).error(
            "step entry record could not be allocated; the step change is rolled back"
        )
        raise EntryAllocationFailed(
            f"task {task.id}: the move to step {step.name!r} did not happen "
            "(its entry record could not be written); try again"
        ) from None
    prepared.defer(
        uow.conn,
        _ADMIT if queued else _ADMIT_UNQUEUED,
        {
            "b_task_id": task.id,
            "b_workflow_id": workflow.id,
            "b_step_id": step.id,
            "b_state": state,
            "b_stamp": stamp,
            "b_halted": halted,
            "b_generation": generation,
        },
    )
    _write_history(uow, task.id, session_id, from_step_id, step.id, label, actor)
    if counted:
        runaway.count_arrival(uow, task, step.id)
    if state == "COMPLETED":
        # a parent's last child, a task's last blocker: their triggers commit with the arrival
        outbox.note_terminal(uow, task.id, task.parent_id, entry.id if entry else ids.new_id())
    events.record(
        uow,
        "task.moved",
        task.id,
        workflow_id=workflow.id,
        from_step_id=from_step_id,
        to_step_id=step.id,
        entry_path=path,
        queued=False,
        entry_id=entry.id if entry else None,
        entry_seq=entry.entry_seq if entry else None,
    )
    committed = attrs.evolve(
        task,
        workflow_id=workflow.id,
        workflow_step_id=step.id,
        wip_admitted=True,
        queued_for_step_id=None,
        queued_at=None,
        state=state,
        updated_at=stamp,
        loop_halted_step_id=halted,
        loop_generation=generation,
    )  # one copy of the task for the admission and its loop fields
    return Arrival(committed, workflow, step, path, from_step_id, session_id, entry)


# -- the one function that changes a task's step ------------------------------------------------


StepChoice = str | Callable[[Task], str]
"""A step id, or a function choosing one from the task as it stands in the transaction (so a
caller naming the step relative to the task reads the task once, under the write lock)."""


def move(
    kernel: Kernel | HasKernel,
    task_id: str,
    to_step: StepChoice,
    *,
    path: str,
    label: str,
    expected_step_id: str | None = None,
    actor: str = "",
    by_trigger: bool | None = None,
) -> Change:
    """Put the task at `to_step` (possibly in another workflow), as entry path `path`.

    :param label: the `session_step_history.trigger` for this route.
    :param by_trigger: a trigger's move, counted by the runaway-loop limit and stopped by it:
        default, the engine's transitions (E1); a trigger's `switch_workflow` (E4) says so.
    :param expected_step_id: compare-and-set: change nothing unless the task stands there.
    A LanewayError raised by a `to_step` function aborts the move with nothing written.
    Commits and returns: what follows the commit is `core.arrival.move`'s.
    """
    kernel = kernel_of(kernel)
    # the board is followed from the task's read (_task_row), not by a read at BEGIN
    with kernel.store.transaction(follow_board=False) as uow:
        task, session_id = _task_row(uow, task_id)
        step_id = to_step(task) if callable(to_step) else to_step
        workflow, step = kernel.read.step(step_id)
        source = task.workflow_step_id
        if expected_step_id is not None and source != expected_step_id:
            return Change(task, source, changed=False, abandoned=True)
        if source == step.id:
            # Same step: not an arrival, whether admitted or queued here. A person's move
            # there still resumes a task the runaway-loop limit stopped.
            if path == runaway.PERSON_PATH:
                task = runaway.reset_count(uow, task)
            return Change(task, source, changed=False, queued=not task.wip_admitted)
        counted = path == runaway.TRIGGER_PATH if by_trigger is None else by_trigger
        if counted and runaway.halted(uow, task, workflow, step):
            # returning commits the flag runaway.halted may have set
            return Change(task, source, changed=False, halted=True)
        if has_room(uow.conn, step, task.id, task.is_ephemeral):
            admitted = _admit(
                kernel.bundle().registry,
                uow,
                task,
                workflow,
                step,
                path=path,
                label=label,
                actor=actor,
                from_step_id=source,
                session_id=session_id,
                counted=counted,
            )
            arrival: Arrival | None = admitted
            committed = admitted.task
            queued = False
        else:
            arrival = None
            queued = True
            stamp = ids.now()
            placed: dict[str, Any] = {
                "workflow_id": workflow.id,
                "workflow_step_id": step.id,
                "wip_admitted": False,
                "queued_for_step_id": step.id,
                "queued_at": stamp,
                "updated_at": stamp,
            }
            if path == runaway.PERSON_PATH:
                task = runaway.fields_after(task, path)
                placed.update(loop_halted_step_id=None, loop_generation=task.loop_generation)
            uow.conn.execute(sa.update(TASKS).where(TASKS.c.id == task.id).values(**placed))
            _write_history(uow, task.id, session_id, source, step.id, label, actor)
            events.record(
                uow,
                "task.moved",
                task.id,
                workflow_id=workflow.id,
                from_step_id=source,
                to_step_id=step.id,
                entry_path=None,
                queued=True,
                entry_id=None,
            )
            committed = attrs.evolve(task, **placed)
    faults.reach("transition.after_commit")
    _log_change(committed, source, step, path, queued)
    return Change(committed, source, changed=True, queued=queued, arrival=arrival, left=task)


def _log_change(task: Task, source: str | None, step: Step, path: str, queued: bool) -> None:
    logger.bind(
        task_id=task.id,
        from_step_id=source,
        step_id=step.id,
        step_name=step.name,
        workflow_id=step.workflow_id,
        entry_path=path,
        queued=queued,
    ).debug("step change committed")


# -- WIP promotion: one admission into a vacated step -------------------------------------------


@attrs.frozen
class Promotion:
    """One queued task admitted into a step with room (entry path E3), committed."""

    arrival: Arrival
    left: Task
    """The candidate as it stood before (its source step's on_exit runs when it moved out)."""
    source: str | None


def admit_next(kernel: Kernel, workflow: Workflow, step: Step) -> Promotion | None:
    """Admit the next queued task into `step` if it has room, in one transaction; None when
    the step is full, nobody waits, or the admission could not be written (logged)."""
    try:
        with kernel.store.transaction() as uow:
            if not has_room(uow.conn, step, None, False):
                return None
            candidate = next_candidate(uow.conn, workflow, step)
            if candidate is None:
                return None
            source = candidate.workflow_step_id
            arrival = _admit(
                kernel.bundle().registry,
                uow,
                candidate,
                workflow,
                step,
                path="E3",
                label="queue_promotion",
                actor="",
                from_step_id=source,
                session_id=live_session_id(uow.conn, candidate.id),
            )
    except NotFound:
        return None
    except EntryAllocationFailed:
        # Logged by _admit; the candidate stays queued. The move that freed the slot has
        # committed and is not this failure's to report.
        return None
    faults.reach("transition.after_commit")
    _log_change(arrival.task, source, step, "E3", False)
    return Promotion(arrival, candidate, source)


# -- step writes that are not arrivals -------------------------------------------------------------


def restore_step(kernel: Kernel, task_id: str, step_id: str) -> tuple[Task, Task]:
    """Put the task back at a step from history (message rollback): no entry work runs.
    Returns the task before and after."""
    workflow, step = kernel.read.step(step_id)
    return _place(kernel, task_id, workflow.id, step.id)


def detach(kernel: Kernel, task_id: str) -> tuple[Task, Task]:
    """Take the task out of its workflow: it stands at no step, which is not an arrival.
    Returns the task before and after."""
    return _place(kernel, task_id, None, None)


def _place(
    kernel: Kernel, task_id: str, workflow_id: str | None, step_id: str | None
) -> tuple[Task, Task]:
    """Stand the task at `step_id` of `workflow_id` (or at none), admitted and queued nowhere,
    without an arrival: `restore_step` and `detach`. Returns the task before and after."""
    with kernel.store.transaction() as uow:
        task, _session = _task_row(uow, task_id)
        uow.conn.execute(
            sa.update(TASKS)
            .where(TASKS.c.id == task_id)
            .values(
                workflow_id=workflow_id,
                workflow_step_id=step_id,
                wip_admitted=True,
                queued_for_step_id=None,
                queued_at=None,
                updated_at=ids.now(),
            )
        )
        committed, _session = _task_row(uow, task_id)
        _moved_without_arrival(uow, task, committed)
    return task, committed


def _moved_without_arrival(uow: UnitOfWork, before: Task, after: Task) -> None:
    if before.workflow_step_id != after.workflow_step_id:
        events.record(
            uow,
            "task.moved",
            after.id,
            workflow_id=after.workflow_id,
            from_step_id=before.workflow_step_id,
            to_step_id=after.workflow_step_id,
            entry_path=None,
            queued=False,
            entry_id=None,
        )
