"""Comments on a task (CLI.md `task comment` / `task comments`): each fires on_comment at the
task's step with the operation id `task_comment:<comment id>` (kandev-domain section 1), so a
delivery of one comment's trigger evaluates its actions once, whoever delivers it again.

The comment's own transaction also puts its trigger in the outbox (`core.outbox`): the process
that wrote it delivers it at once (a delivery pass, `TriggerService.drain`), and a process
that dies between the comment's COMMIT and that delivery leaves it to the next pass
(`recover`, any `worker` or `serve`) instead of losing it."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import attrs
import sqlalchemy as sa

from core import actors, faults, ids, outbox
from core.engine import TriggerResult
from core.errors import LanewayError, NotFound
from core.model import Comment
from core.services.base import Lazy, Service
from core.store import events, rows
from core.store import tables as t
from core.text import MAX_COMMENT, require_text

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.sessions import SessionService
    from core.services.tasks import TaskService
    from core.services.triggers import TriggerService
    from core.store.database import UnitOfWork

C = t.comments

DEFAULT_AUTHOR = "user"
"""Who a comment is by when the command line names no one."""


def operation_id(comment_id: str) -> str:
    """The on_comment operation id of a comment (kept in `applied_operations`)."""
    return f"task_comment:{comment_id}"


def _queue(
    uow: UnitOfWork, comment_id: str, task_id: str, author: str, body: str, by_agent: str | None
) -> None:
    """The comment's on_comment in the outbox, in the comment's transaction, with the payload
    `fire` delivers and the agent that wrote it."""
    payload = {"comment_id": comment_id, "author": author, "body": body}
    outbox.put(
        uow, operation_id(comment_id), task_id, "on_comment", payload, fired_by_agent=by_agent
    )


class CommentService(Service):
    """A task's comments, and the on_comment trigger each fires."""

    def __init__(
        self,
        peers: Peers,
        *,
        sessions: Lazy[SessionService],
        tasks: Lazy[TaskService],
        triggers: Lazy[TriggerService],
    ) -> None:
        super().__init__(peers)
        self._sessions = sessions
        self._tasks = tasks
        self._triggers = triggers

    def add(
        self,
        task_ref: str,
        body: str,
        *,
        author: str | None = None,
        file: str | None = None,
        line: int | None = None,
        by_agent: str | None = None,
    ) -> Comment:
        """Add a comment to the task (by `author`, default `user`), or to line `line` of
        `file` in its diff, then fire on_comment at its step (when it has one). `by_agent`:
        the agent profile that wrote it (a run's `comment` tool): on_comment does not wake
        that agent, and counts toward the runaway-loop limit."""
        self._require_writer()
        if (file is None) != (line is None):
            raise LanewayError("a line comment needs both --file PATH and --line N")
        if file is not None:
            if not file.strip():
                raise LanewayError("comment file: must not be empty")
            require_text(file, "comment file", t.column_length(C.c.file))
        if line is not None and line < 1:
            raise LanewayError(f"comment line {line}: must be 1 or more")
        author = DEFAULT_AUTHOR if author is None else author
        if not body.strip():
            raise LanewayError("comment body: must not be empty")
        require_text(body, "comment body", MAX_COMMENT)
        if not author.strip():
            raise LanewayError("comment author: must not be empty")
        require_text(author, "comment author", t.column_length(C.c.author))
        task = self._tasks().get(task_ref)
        with self.peers.store.transaction() as uow:
            comment = Comment(
                id=ids.new_id(),
                task_id=task.id,
                author=author,
                body=body,
                created_at=ids.now(),  # in the transaction: see events.in_commit_order
                file=file,
                line=line,
                actor=actors.current(),
            )
            uow.conn.execute(
                sa.insert(C).values(
                    id=comment.id,
                    task_id=comment.task_id,
                    author=comment.author,
                    body=comment.body,
                    created_at=comment.created_at,
                    file=comment.file,
                    line=comment.line,
                    actor=comment.actor,
                )
            )
            # the feedback cursor (a run's claim time) never passes a comment its run missed
            at = events.in_commit_order(uow, C.c.created_at, comment.id, comment.created_at)
            comment = attrs.evolve(comment, created_at=at)
            faults.reach("comment.before_commit")
            events.record(uow, "comment.added", task.id, comment_id=comment.id)
            _queue(uow, comment.id, task.id, comment.author, comment.body, by_agent)
        faults.reach("comment.after_commit")
        self._triggers().drain()  # delivered now, as any delivery pass would (core.outbox)
        return comment

    def add_once(
        self,
        task_ref: str,
        key: str,
        body: str,
        *,
        author: str,
        file: str | None = None,
        line: int | None = None,
    ) -> Comment | None:
        """A comment that comes from outside the board once per `key` (a forge's review
        comment): its id is derived from the key and inserted only when absent, one
        conditional statement deciding, then on_comment fires; None when it was there."""
        self._require_writer()
        task = self._tasks().get(task_ref)
        comment_id = "k" + hashlib.sha256(f"{task.id}:{key}".encode()).hexdigest()[:40]
        values = {
            "id": comment_id,
            "task_id": task.id,
            "author": author[: t.column_length(C.c.author)] or "someone",
            "body": body if body.strip() else "(empty)",
            "created_at": "",  # in the transaction: see events.in_commit_order
            "file": file,
            "line": line,
            "actor": actors.current(),
        }
        absent = ~sa.exists().where(C.c.id == comment_id)
        with self.peers.store.transaction() as uow:
            at = ids.now()
            values["created_at"] = at
            select = sa.select(*(sa.literal(v, C.c[k].type) for k, v in values.items()))
            inserted = sa.insert(C).from_select(list(values), select.where(absent))
            if uow.conn.execute(inserted.returning(C.c.id)).first() is None:
                return None
            events.in_commit_order(uow, C.c.created_at, comment_id, at)
            events.record(uow, "comment.added", task.id, comment_id=comment_id)
            _queue(uow, comment_id, task.id, str(values["author"]), str(values["body"]), None)
        faults.reach("comment.after_commit")
        self._triggers().drain()
        return self.get(comment_id)

    def fire(self, comment_id: str, *, by_agent: str | None = None) -> TriggerResult:
        """Deliver the comment's on_comment trigger: evaluated once per comment (its operation
        id is claimed in the ledger), so a second delivery is `idempotent` and does nothing."""
        self._require_writer()
        comment = self.get(comment_id)
        live = self._sessions().live(comment.task_id)
        return self.peers.engine.handle_trigger(
            comment.task_id,
            "on_comment",
            session_id=live.id if live is not None else None,
            operation_id=operation_id(comment.id),
            payload={"comment_id": comment.id, "author": comment.author, "body": comment.body},
            fired_by_agent=by_agent,
        )

    def get(self, comment_id: str) -> Comment:
        with self.peers.store.read() as conn:
            row = conn.execute(sa.select(C).where(C.c.id == comment_id)).mappings().first()
        if row is None:
            raise NotFound(f"no comment {comment_id!r}")
        return rows.comment(row)

    def list(self, task_ref: str) -> list[Comment]:
        """The task's comments, oldest first."""
        task = self._tasks().get(task_ref)
        with self.peers.store.read() as conn:
            result = conn.execute(
                sa.select(C).where(C.c.task_id == task.id).order_by(C.c.created_at, C.c.id)
            ).mappings()
            return [rows.comment(r) for r in result]
