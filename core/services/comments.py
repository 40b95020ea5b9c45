"""Comments on a task (CLI.md `task comment` / `task comments`): each fires on_comment at the
task's step with the operation id `task_comment:<comment id>` (kandev-domain section 1), so a
delivery of one comment's trigger evaluates its actions once, whoever delivers it again."""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from core import ids
from core.engine import TriggerResult
from core.errors import LanewayError, NotFound
from core.model import Comment
from core.services.base import Lazy, Service
from core.store import events, rows
from core.store import tables as t
from core.text import require_text

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.sessions import SessionService
    from core.services.tasks import TaskService

C = t.comments

DEFAULT_AUTHOR = "user"
"""Who a comment is by when the command line names no one."""


def operation_id(comment_id: str) -> str:
    """The on_comment operation id of a comment (kept in `applied_operations`)."""
    return f"task_comment:{comment_id}"


class CommentService(Service):
    """A task's comments, and the on_comment trigger each fires."""

    def __init__(
        self, peers: Peers, *, sessions: Lazy[SessionService], tasks: Lazy[TaskService]
    ) -> None:
        super().__init__(peers)
        self._sessions = sessions
        self._tasks = tasks

    def add(
        self,
        task_ref: str,
        body: str,
        *,
        author: str | None = None,
        by_agent: str | None = None,
    ) -> Comment:
        """Add a comment to the task (by `author`, default `user`), then fire on_comment at
        its step (when it has one). `by_agent`: the agent profile that wrote it (a run's
        `comment` tool): on_comment does not wake that agent, and counts toward the
        runaway-loop limit."""
        self._require_writer()
        author = DEFAULT_AUTHOR if author is None else author
        if not body.strip():
            raise LanewayError("comment body: must not be empty")
        require_text(body, "comment body")
        if not author.strip():
            raise LanewayError("comment author: must not be empty")
        require_text(author, "comment author", t.column_length(C.c.author))
        task = self._tasks().get(task_ref)
        comment = Comment(
            id=ids.new_id(), task_id=task.id, author=author, body=body, created_at=ids.now()
        )
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(C).values(
                    id=comment.id,
                    task_id=comment.task_id,
                    author=comment.author,
                    body=comment.body,
                    created_at=comment.created_at,
                )
            )
            events.record(uow, "comment.added", task.id, comment_id=comment.id)
        self.fire(comment.id, by_agent=by_agent)
        return comment

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
