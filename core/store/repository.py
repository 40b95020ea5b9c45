"""The reads the kernel needs: a task, a workflow, a step, a session, a task's live session.

Services and the layers below them read through here, so there is one copy of each query and
one workflow cache. The cache follows the board: every transaction that changes a workflow or
a step moves the board's catalogue version (`core.board.bump`), and the host calls `forget()`
when it sees the version move (at the start of its next transaction or read), in this process
or any other.
"""

from __future__ import annotations

import threading

import sqlalchemy as sa

from core.errors import NotFound
from core.model import ACTIVE_SESSION_STATES, Session, Step, Task, Workflow
from core.store import prepared, rows
from core.store import tables as t
from core.store.database import Store
from core.store.prepared import fixed_in

_S = t.task_sessions
# Built once: constructing a Core statement costs more than executing a cached one.
_LIVE_SESSION = (
    sa.select(_S.c.id)
    .where(
        _S.c.task_id == sa.bindparam("task_id"), fixed_in(_S.c.state, tuple(ACTIVE_SESSION_STATES))
    )
    .order_by(_S.c.is_primary.desc(), _S.c.updated_at.desc(), _S.c.id.desc())
    .limit(1)
)
_SESSION = sa.select(_S).where(_S.c.id == sa.bindparam("session_id"))
_STEP_OWNER = sa.select(t.workflow_steps.c.workflow_id).where(
    t.workflow_steps.c.id == sa.bindparam("step_id")
)


def live_session_id(conn: sa.Connection, task_id: str) -> str | None:
    """The task's newest active session (the one history rows and session kinds act on)."""
    found = conn.execute(_LIVE_SESSION, {"task_id": task_id}).scalar()
    return str(found) if found is not None else None


class Repository:
    """Reads by id over one store; workflows are cached until `forget()`."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._cache: dict[str, Workflow] = {}
        self._step_owner: dict[str, str] = {}
        self._cache_lock = threading.Lock()

    def forget(self, workflow_id: str | None = None) -> None:
        """Drop cached declarations (one workflow's, or all). New dicts, not cleared ones: a
        load that began before this call fills the dicts it started with, which nobody reads
        any more."""
        with self._cache_lock:
            if workflow_id is not None:
                self._cache.pop(workflow_id, None)
                return
            self._cache = {}
            self._step_owner = {}

    def task(self, task_id: str) -> Task:
        """A task by id (or any reference `rows.load_task` resolves)."""
        with self._store.read() as conn:
            task = rows.load_task(conn, task_id)
        if task is None:
            raise NotFound(f"no task {task_id!r}")
        return task

    def workflow(self, workflow_id: str) -> Workflow:
        """A workflow by id, served from the cache as of this thread's last transaction or
        read."""
        cached = self._cache.get(workflow_id)
        if cached is not None:
            return cached
        with self._store.read() as conn:
            # Taken after the read began: the version check at its start may forget().
            cache, owners = self._cache, self._step_owner
            wf = rows.load_workflow(conn, workflow_id)
        if wf is None:
            raise NotFound(f"no workflow {workflow_id!r}")
        with self._cache_lock:
            cache[workflow_id] = wf
            for step in wf.steps:
                owners[step.id] = wf.id
        return wf

    def step(self, step_id: str) -> tuple[Workflow, Step]:
        """The step and its workflow; served from the cache once loaded."""
        workflow_id = self._step_owner.get(step_id)
        if workflow_id is None:
            with self._store.read() as conn:
                workflow_id = conn.execute(_STEP_OWNER, {"step_id": step_id}).scalar()
        if workflow_id is None:
            raise NotFound(f"no step {step_id!r}")
        wf = self.workflow(workflow_id)
        step = wf.step(step_id)
        assert step is not None
        return wf, step

    def session(self, session_id: str) -> Session:
        with self._store.read() as conn:
            row = prepared.execute(conn, _SESSION, {"session_id": session_id}).mapping()
        if row is None:
            raise NotFound(f"no session {session_id!r}")
        return rows.session(row)

    def live_session(self, task_id: str) -> Session | None:
        """The task's live session (its newest active one), or None."""
        with self._store.read() as conn:
            found = live_session_id(conn, task_id)
            if found is None:
                return None
            row = conn.execute(_SESSION, {"session_id": found}).mappings().first()
        return rows.session(row) if row is not None else None
