"""The runaway-loop limit: how many times triggers may bring a task to one step, or queue
runs for it there.

Each trigger-driven admission at a step is counted (`count_arrival`) and each trigger-driven
wake of its agents (`wake`, issue 38 item 2), in the task's current generation; a trigger's
move to a step the task has reached `max_step_arrivals` times is refused and the task flagged
(`halted`, one conditional statement, so two racing triggers warn once); a person's move clears
the flag and starts a new generation of counts (`fields_after`, `values_after`,
`reset_count`). The transition (`core.transition`) calls these inside its own transaction.
"""

from __future__ import annotations

from typing import Any

import attrs
import sqlalchemy as sa

from core import ids
from core.kernel import HasKernel, Kernel, kernel_of
from core.logs import logger
from core.model import Step, Task, Workflow
from core.store import dialect
from core.store import tables as t
from core.store.database import UnitOfWork

TASKS = t.tasks
PERSON_PATH = "E2"
"""A person's move: it clears the loop flag and starts the counts afresh."""
TRIGGER_PATH = "E1"
"""Moves a trigger makes: the ones counted, and the ones the limit stops."""
_UPSERTS: dict[tuple[str, str], Any] = {}


def fields_after(task: Task, path: str) -> Task:
    """The task's runaway-loop fields once this move is made: a person's move clears the flag
    and starts a new generation of counts."""
    if path != PERSON_PATH:
        return task
    halted, generation = values_after(task, path)
    return attrs.evolve(task, loop_halted_step_id=halted, loop_generation=generation)


def values_after(task: Task, path: str) -> tuple[str | None, int]:
    """`fields_after`'s (loop_halted_step_id, loop_generation), without copying the
    task (an admission copies it once, with its other fields)."""
    if path != PERSON_PATH:
        return task.loop_halted_step_id, task.loop_generation
    if task.loop_halted_step_id is not None:
        logger.bind(task_id=task.id, step_id=task.loop_halted_step_id).info(
            "a person moved the task: the runaway-loop flag is cleared"
        )
    return None, task.loop_generation + 1


def count_arrival(uow: UnitOfWork, task: Task, step_id: str) -> None:
    """One more trigger-driven admission at the step, in the task's current generation: one
    upsert (a count of an older generation restarts at 1), so no read precedes the write."""
    _count(uow, task, step_id, "arrivals")


def _count(uow: UnitOfWork, task: Task, step_id: str, counter: str) -> None:
    """One more `counter` (`arrivals`, `wakes`) at the step in the task's generation; the
    row's other count restarts at 0 when its generation is an older one."""
    name = uow.conn.dialect.name
    statement = _UPSERTS.get((name, counter))
    if statement is None:
        other = "wakes" if counter == "arrivals" else "arrivals"
        arrivals = t.task_step_arrivals
        base = dialect.upsert_into(name, arrivals).values(
            task_id=sa.bindparam("a_task_id"),
            step_id=sa.bindparam("a_step_id"),
            generation=sa.bindparam("a_generation"),
            **{counter: 1, other: 0},
        )
        same = arrivals.c.generation == base.excluded.generation
        statement = _UPSERTS[(name, counter)] = base.on_conflict_do_update(
            index_elements=[arrivals.c.task_id, arrivals.c.step_id],
            set_={
                counter: sa.case((same, arrivals.c[counter] + 1), else_=1),
                other: sa.case((same, arrivals.c[other]), else_=0),
                "generation": base.excluded.generation,
            },
        )
    uow.conn.execute(
        statement,
        {"a_task_id": task.id, "a_step_id": step_id, "a_generation": task.loop_generation},
    )


def wake(kernel: Kernel | HasKernel, task: Task, workflow: Workflow, step: Step) -> bool:
    """Whether a trigger may queue runs for the task at its step (the runaway-loop limit over
    trigger-driven runs, issue 38 item 2): counted as `wakes` beside the step's `arrivals`,
    against the same `max_step_arrivals`, since a person last moved the task. The flag is set
    by the same conditional statement as for moves, so two racing triggers warn once."""
    kernel = kernel_of(kernel)
    with kernel.store.transaction() as uow:
        current = uow.conn.execute(
            sa.select(TASKS.c.loop_halted_step_id, TASKS.c.loop_generation).where(
                TASKS.c.id == task.id
            )
        ).first()
        if current is None:
            return False
        task = attrs.evolve(task, loop_halted_step_id=current[0], loop_generation=current[1])
        if halted(uow, task, workflow, step, "wakes"):
            return False
        _count(uow, task, step.id, "wakes")
        return True


def reset_count(uow: UnitOfWork, task: Task) -> Task:
    """A person's move to the step the task stands at: no admission to carry the reset."""
    task = fields_after(task, PERSON_PATH)
    uow.conn.execute(
        sa.update(TASKS)
        .where(TASKS.c.id == task.id)
        .values(loop_halted_step_id=None, loop_generation=task.loop_generation)
    )
    return task


def halted(
    uow: UnitOfWork, task: Task, workflow: Workflow, step: Step, counter: str = "arrivals"
) -> bool:
    """Whether the runaway-loop limit stops this trigger's move. The flag is set by one
    conditional statement: its row count says whether this move is the one that hit the
    limit (and warns), so two racing triggers warn once."""
    log = logger.bind(
        task_id=task.id,
        step_id=step.id,
        step_name=step.name,
        workflow_id=workflow.id,
        limit=workflow.max_step_arrivals,
    )
    if task.loop_halted_step_id is not None:
        log.debug("task stopped by the runaway-loop limit: trigger move not taken")
        return True
    limit = workflow.max_step_arrivals
    if limit <= 0:
        return False
    arrivals = t.task_step_arrivals
    reached = sa.exists().where(
        arrivals.c.task_id == task.id,
        arrivals.c.step_id == step.id,
        arrivals.c.generation == task.loop_generation,
        arrivals.c[counter] >= limit,
    )
    flagged = uow.conn.execute(
        sa.update(TASKS)
        .where(TASKS.c.id == task.id, TASKS.c.loop_halted_step_id.is_(None), reached)
        .values(loop_halted_step_id=step.id, updated_at=ids.now())
    ).rowcount
    if not flagged:
        return False
    if counter == "wakes":
        log.warning(
            "runaway loop: triggers queued runs for the task at this step the limit's number "
            "of times; triggers no longer move it or wake its agents until a person moves it"
        )
    else:
        log.warning(
            "runaway loop: the task reached this step the limit's number of times; "
            "triggers no longer move it until a person does"
        )
    return True
