"""Blockers (CLI.md `task block T --by B` / `task unblock T --by B`): B blocks T until B
reaches a terminal step; when T's last blocker does, T gets on_blocker_resolved (queued in
that arrival's own transaction, `core.outbox`).

`task_blockers` is the relation; `tasks.blocked_by` a copy of T's rows as a JSON list, written
in the same transaction, so every read of a task carries it. A block that would close a cycle
(B already waits, directly or through others, on T) is refused with one line.

The cycle check reads the whole graph, so two blocks committed at once could each pass it and
together close a cycle (P <- Q, Q <- R, R <- P, each checked before the others committed). The
database settles it: on SQLite every write transaction holds the one write lock from its BEGIN;
on PostgreSQL a block takes a transaction-level advisory lock on the blocker graph before it
checks, so blocks are decided one after another, each seeing the edges committed before it.
Unblocking removes edges, which closes no cycle, and takes no lock.
"""

from __future__ import annotations

import json
from typing import Final

import sqlalchemy as sa

from core import ids
from core.errors import Conflict, LanewayError
from core.model import Task
from core.outbox import TERMINAL_STATES
from core.services.base import Service
from core.services.refs import find_task
from core.store import events, waits
from core.store import tables as t
from core.store.database import UnitOfWork

TASKS = t.tasks
BLOCKERS = t.task_blockers
PG_GRAPH_LOCK: Final = 0x6C6E77626C6B72
"""The advisory lock key a PostgreSQL block holds from its cycle check to its COMMIT."""
_PG_GRAPH = sa.text(f"SELECT pg_advisory_xact_lock({PG_GRAPH_LOCK})")


def _hold(uow: UnitOfWork, task_id: str) -> None:
    """The blocked task's row held until the transaction ends (PostgreSQL; SQLite's writers
    are serialised): two blocks or unblocks of one task are ordered, each writing `blocked_by`
    and the task's wait from the other's result."""
    uow.conn.execute(
        sa.select(TASKS.c.id).where(TASKS.c.id == task_id).with_for_update(key_share=True)
    )


def write_blocked_by(uow: UnitOfWork, task_id: str) -> None:
    """Copy the task's blockers (oldest first) onto its row."""
    found = [
        str(b)
        for b in uow.conn.execute(
            sa.select(BLOCKERS.c.blocker_id)
            .where(BLOCKERS.c.task_id == task_id)
            .order_by(BLOCKERS.c.created_at, BLOCKERS.c.blocker_id)
        ).scalars()
    ]
    uow.conn.execute(
        sa.update(TASKS)
        .where(TASKS.c.id == task_id)
        .values(blocked_by=json.dumps(found) if found else None, updated_at=ids.now())
    )


def _waits_on(uow: UnitOfWork, start: str, target: str) -> list[str] | None:
    """The chain of blockers by which `start` waits on `target` (start first, target last),
    or None when it does not."""
    seen = {start: ""}
    frontier = [start]
    while frontier:
        found = uow.conn.execute(
            sa.select(BLOCKERS.c.task_id, BLOCKERS.c.blocker_id).where(
                BLOCKERS.c.task_id.in_(frontier)
            )
        ).all()
        frontier = []
        for task_id, blocker in found:
            if blocker in seen:
                continue
            seen[str(blocker)] = str(task_id)
            if blocker == target:
                chain = [str(blocker)]
                while seen[chain[-1]]:
                    chain.append(seen[chain[-1]])
                return list(reversed(chain))
            frontier.append(str(blocker))
    return None


class BlockerService(Service):
    """Which tasks block which. A blocked task may be moved like any other, but its agent does
    not start while a blocker is unfinished: `task start` refuses, and a `task_assigned` run
    (an arrival's auto start) is not queued (`RunService.assign`)."""

    def _task(self, ref: str) -> Task:
        # the plain reader `TaskService.get` is, so the blockers name no task service: the task
        # service names them (its start refuses a blocked task), and one arrow is enough
        return find_task(self.peers.store, self.peers.repository, ref)

    def block(self, task_ref: str, by: str) -> Task:
        """B (`by`) blocks the task. Blocking a task on itself, or on a task that already
        waits on it, is refused; blocking it again by the same task changes nothing."""
        self._require_writer()
        task = self._task(task_ref)
        blocker = self._task(by)
        if blocker.id == task.id:
            raise LanewayError(f"task {task.id}: a task cannot block itself")
        with self.peers.store.transaction() as uow:
            if uow.conn.dialect.name == "postgresql":
                uow.conn.execute(_PG_GRAPH)  # each statement after it sees the blocks before
            _hold(uow, task.id)
            # the blocker's row shared: its arrival at its terminal step (which holds its row)
            # either committed before, and is seen finished below, or waits for this block to
            # commit, and then sees it (`outbox.note_blocked`) and resolves it
            uow.conn.execute(
                sa.select(TASKS.c.id).where(TASKS.c.id == blocker.id).with_for_update(read=True)
            )
            chain = _waits_on(uow, blocker.id, task.id)
            if chain is not None:
                raise Conflict(
                    f"task {task.id} cannot be blocked by {blocker.id}: that would make a cycle "
                    f"({' -> '.join([task.id, *chain])})"
                )
            added = uow.conn.execute(
                sa.text(
                    "INSERT INTO task_blockers (task_id, blocker_id, created_at) "
                    "VALUES (:b_task, :b_blocker, :b_at) "
                    "ON CONFLICT (task_id, blocker_id) DO NOTHING"
                ),
                {"b_task": task.id, "b_blocker": blocker.id, "b_at": ids.now()},
            ).rowcount
            if added == 1:
                write_blocked_by(uow, task.id)
                events.record(uow, "task.updated", task.id, blocked_by=blocker.id)
                waits.begin(
                    uow,
                    task.id,
                    "blocked",
                    waits.unfinished_blockers(task.id),
                    blocked_by=blocker.id,
                )
        return self._task(task.id)

    def unblock(self, task_ref: str, by: str) -> Task:
        """B no longer blocks the task (an error when it did not)."""
        self._require_writer()
        task = self._task(task_ref)
        blocker = self._task(by)
        with self.peers.store.transaction() as uow:
            _hold(uow, task.id)
            gone = uow.conn.execute(
                sa.delete(BLOCKERS)
                .where(BLOCKERS.c.task_id == task.id, BLOCKERS.c.blocker_id == blocker.id)
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if gone != 1:
                raise LanewayError(f"task {task.id} is not blocked by {blocker.id}")
            write_blocked_by(uow, task.id)
            events.record(uow, "task.updated", task.id, unblocked_by=blocker.id)
            waits.end(uow, task.id, "blocked", ~waits.unfinished_blockers(task.id))
        return self._task(task.id)

    def unfinished(self, task_id: str) -> list[Task]:
        """The task's blockers that have not finished (not at a terminal step, nor failed or
        cancelled), oldest block first: while there is one, the task's agent does not start
        (docs/cli.md "Blockers")."""
        with self.peers.store.read() as conn:
            waiting = [
                str(b)
                for b in conn.execute(
                    sa.select(BLOCKERS.c.blocker_id)
                    .join(TASKS, TASKS.c.id == BLOCKERS.c.blocker_id)
                    .where(
                        BLOCKERS.c.task_id == task_id,
                        TASKS.c.state.not_in(sorted(TERMINAL_STATES)),
                    )
                    .order_by(BLOCKERS.c.created_at, BLOCKERS.c.blocker_id)
                ).scalars()
            ]
        return [self._task(b) for b in waiting]

    def blocking(self, task_ref: str) -> list[str]:
        """The ids of the tasks the task blocks."""
        task = self._task(task_ref)
        with self.peers.store.read() as conn:
            return [
                str(r)
                for r in conn.execute(
                    sa.select(BLOCKERS.c.task_id)
                    .where(BLOCKERS.c.blocker_id == task.id)
                    .order_by(BLOCKERS.c.created_at, BLOCKERS.c.task_id)
                ).scalars()
            ]
