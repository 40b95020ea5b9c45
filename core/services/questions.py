"""Questions an agent asks a person (issue 41 item 6): the tool server's `ask` and ACP
`elicitation/create` (AGENTS.md), answered with `question answer` (CLI.md) or
`POST /api/questions/{q}` (HTTP.md).

Modelled on permission requests (`core.services.permissions`): a question is a row that leaves
`pending` exactly once, by a conditional UPDATE whose row count decides, so of two people
answering at once, or a person and a turn that ends, one wins and the other is told what the
row became. Each change writes its events in the same transaction (`question.asked`,
`question.answered`, `task.needs_person` / `task.needs_person_ended` with reason `question`).
A person's answer fires `on_approval_resolved` on the task (operation id `question:<id>`), as
a permission's does, when the workflow declares it.

An answer is checked against the question's fields (type, required, choices) before it is
written; a bad one is a one-line LanewayError naming the field. The waiting turn (`wait`)
learns of an answer at once (the board's NOTIFY on PostgreSQL, its wake-up socket on SQLite,
`core.store.wake`), within `POLL_S` on a SQLite board where no socket could be had.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa

from core import ids, runs
from core.engine import TriggerResult
from core.errors import Conflict, LanewayError, NotFound
from core.model import FIELD_TYPES, QUESTION_STATES, Question, QuestionField
from core.services.base import Lazy, Service
from core.services.permissions import wait_delivered
from core.services.refs import resolve_id
from core.store import events, rows
from core.store import tables as t
from core.text import require_text

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.tasks import TaskService

Q = t.questions

POLL_S: Final = 0.2
"""How often a waiting turn re-reads its question on SQLite (and checks its turn is alive)."""
RECHECK_S: Final = 2.0
"""PostgreSQL: the row is re-read this often even without a NOTIFY."""
DEFAULT_BY: Final = "user"
MAX_FIELDS: Final = 50
_TRUE: Final = ("true", "yes", "on", "1")
_FALSE: Final = ("false", "no", "off", "0")


def operation_id(question_id: str) -> str:
    """The on_approval_resolved operation id of a question (kept in `applied_operations`)."""
    return f"question:{question_id}"


def field_json(f: QuestionField) -> dict[str, Any]:
    return {
        "name": f.name,
        "type": f.type,
        "title": f.title,
        "required": f.required,
        "choices": list(f.choices),
    }


def make_fields(raw: Sequence[Mapping[str, Any]]) -> list[QuestionField]:
    """The form of a question from its JSON description; a LanewayError naming the field that
    cannot be one (no name, a name twice, a type laneway does not know, a choice not of it)."""
    if len(raw) > MAX_FIELDS:
        raise LanewayError(f"question: at most {MAX_FIELDS} fields, got {len(raw)}")
    made: list[QuestionField] = []
    for n, spec in enumerate(raw):
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip():
            raise LanewayError(f"question field {n + 1}: 'name' must be non-empty text")
        if any(f.name == name for f in made):
            raise LanewayError(f"question field {name!r}: named twice")
        kind = spec.get("type", "string")
        if kind not in FIELD_TYPES:
            raise LanewayError(
                f"question field {name!r}: type {kind!r} is not one of {', '.join(FIELD_TYPES)}"
            )
        choices = spec.get("choices") or ()
        if not isinstance(choices, list | tuple):
            raise LanewayError(f"question field {name!r}: 'choices' must be a list")
        checked = tuple(_typed(name, kind, c) for c in choices)
        title = spec.get("title") or ""
        made.append(
            QuestionField(
                name=name,
                type=str(kind),
                title=str(title),
                required=bool(spec.get("required", True)),
                choices=checked,
            )
        )
    return made


def check_answer(fields: Sequence[QuestionField], given: Mapping[str, Any]) -> dict[str, Any]:
    """The answer as stored: each value of its field's type (text is converted: the CLI's
    `--field NAME=VALUE`), every required field given, every value one of its choices. A
    LanewayError naming the field otherwise."""
    known = {f.name: f for f in fields}
    for name in given:
        if name not in known:
            offered = ", ".join(known) or "none"
            raise LanewayError(f"answer field {name!r}: the question has no such field ({offered})")
    answer: dict[str, Any] = {}
    for f in fields:
        if f.name not in given or given[f.name] is None:
            if f.required:
                raise LanewayError(f"answer field {f.name!r}: required, not given")
            continue
        value = _typed(f.name, f.type, given[f.name], what="answer field")
        if f.choices and value not in f.choices:
            offered = ", ".join(json.dumps(c) for c in f.choices)
            raise LanewayError(
                f"answer field {f.name!r}: {json.dumps(value)} is not one of {offered}"
            )
        answer[f.name] = value
    return answer


def _typed(name: str, kind: str, value: Any, what: str = "question field") -> Any:
    where = f"{what} {name!r}"
    if kind == "string":
        if not isinstance(value, str):
            raise LanewayError(f"{where}: expected text, got {json.dumps(value)}")
        return value
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in (*_TRUE, *_FALSE):
            return value.strip().lower() in _TRUE
        raise LanewayError(f"{where}: expected true or false, got {json.dumps(value)}")
    if isinstance(value, str):
        try:
            value = int(value) if kind == "integer" else float(value)
        except ValueError:
            raise LanewayError(
                f"{where}: expected a{'n' if kind == 'integer' else ''} {kind}, "
                f"got {json.dumps(value)}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LanewayError(f"{where}: expected a {kind}, got {json.dumps(value)}")
    if kind == "integer":
        if isinstance(value, float) and not value.is_integer():
            raise LanewayError(f"{where}: expected an integer, got {json.dumps(value)}")
        return int(value)
    if not math.isfinite(value):
        raise LanewayError(f"{where}: expected a finite number")
    return value


class QuestionService(Service):
    """The board's questions to a person, and the trigger an answer fires."""

    def __init__(self, peers: Peers, *, tasks: Lazy[TaskService]) -> None:
        super().__init__(peers)
        self._tasks = tasks

    def ask(
        self,
        task_id: str,
        session_id: str,
        *,
        run_id: str | None,
        message: str,
        fields: Sequence[Mapping[str, Any]],
    ) -> Question:
        """Put an agent's question on the board, `pending` until answered. `fields` is the
        form (`[{"name", "type"?, "title"?, "required"?, "choices"?}]`); checked first."""
        self._require_writer()
        require_text(message, "question message")
        made = make_fields(fields)
        found = Question(
            id=ids.new_id(),
            task_id=task_id,
            session_id=session_id,
            run_id=run_id,
            message=message,
            fields=made,
            state="pending",
            answer=None,
            answered_by=None,
            created_at=ids.now(),
            answered_at=None,
        )
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(Q).values(
                    id=found.id,
                    task_id=found.task_id,
                    session_id=found.session_id,
                    run_id=found.run_id,
                    message=found.message,
                    fields=json.dumps([field_json(f) for f in made]),
                    state=found.state,
                    created_at=found.created_at,
                )
            )
            events.record(
                uow,
                "question.asked",
                task_id,
                question_id=found.id,
                run_id=run_id,
                state="pending",
            )
            events.record(
                uow,
                "task.needs_person",
                task_id,
                reason="question",
                question_id=found.id,
                run_id=run_id,
            )
        return found

    def answer(
        self,
        ref: str,
        values: Mapping[str, Any] | None = None,
        *,
        decline: bool = False,
        by: str = DEFAULT_BY,
    ) -> Question:
        """Answer a pending question with `values` (checked against its fields), or decline
        it; then fire on_approval_resolved on its task. A question no longer pending is a
        Conflict naming the state it is in."""
        self._require_writer()
        if not by.strip():
            raise LanewayError("question answer: 'by' must not be empty")
        require_text(by, "question answer 'by'", t.column_length(Q.c.answered_by))
        if decline and values:
            raise LanewayError("question answer: give either field values or decline, not both")
        found = self.find(ref)
        if found.state != "pending":
            raise _answered(found)
        answer = None if decline else check_answer(found.fields, values or {})
        state = "declined" if decline else "answered"
        with self.peers.store.transaction() as uow:
            won = uow.conn.execute(
                sa.update(Q)
                .where(Q.c.id == found.id, Q.c.state == "pending")
                .values(
                    state=state,
                    answer=json.dumps(answer) if answer is not None else None,
                    answered_by=by,
                    answered_at=ids.now(),
                )
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if won == 1:
                events.record(
                    uow,
                    "question.answered",
                    found.task_id,
                    question_id=found.id,
                    run_id=found.run_id,
                    state=state,
                )
                events.record(
                    uow,
                    "task.needs_person_ended",
                    found.task_id,
                    reason="question",
                    question_id=found.id,
                    run_id=found.run_id,
                )
        after = self.get(found.id)
        if won != 1:
            raise _answered(after)
        self.fire(after)
        return after

    def fire(self, question: Question) -> TriggerResult:
        """Deliver the answer's on_approval_resolved (when the workflow declares it):
        evaluated once per question (its operation id is claimed in the ledger)."""
        self._require_writer()
        return self.peers.engine.handle_trigger(
            question.task_id,
            "on_approval_resolved",
            session_id=question.session_id,
            operation_id=operation_id(question.id),
            payload={
                "question_id": question.id,
                "state": question.state,
                "answer": dict(question.answer) if question.answer is not None else None,
                "answered_by": question.answered_by,
            },
        )

    def cancel(self, question_id: str, *, by: str) -> bool:
        """End one question `cancelled` (`by` says why) when it is still pending."""
        self._require_writer()
        with self.peers.store.transaction() as uow:
            return bool(runs.cancel_questions(uow, question_ids=[question_id], by=by))

    def wait(self, question_id: str, *, stop: Callable[[], bool]) -> Question:
        """Block until the question is answered, or `stop()` says its turn is over (checked
        every POLL_S), then until the answer's on_approval_resolved has been delivered
        (`permissions.wait_delivered`); the question as it then stands."""
        found = events.wait_until(
            self.peers.store,
            lambda: self.get(question_id),
            lambda found: found.state != "pending",
            stop=stop,
            poll_s=POLL_S,
            recheck_s=RECHECK_S,
        )
        if found.state in ("answered", "declined"):  # by a person: fired after
            wait_delivered(self.peers, operation_id(found.id), stop=stop)
        return found

    def get(self, question_id: str) -> Question:
        with self.peers.store.read() as conn:
            row = conn.execute(sa.select(Q).where(Q.c.id == question_id)).mappings().first()
        if row is None:
            raise NotFound(f"no question {question_id!r}")
        return rows.question(row)

    def find(self, ref: str) -> Question:
        """A question by its id or a unique suffix of it (at least 6 characters, CLI.md)."""
        with self.peers.store.read() as conn:
            question_id = resolve_id(conn, Q.c.id, ref, "question")
        return self.get(question_id)

    def list(self, *, task: str | None = None, state: str | None = None) -> list[Question]:
        """Questions, oldest first; `task` and `state` narrow them."""
        query = sa.select(Q).order_by(Q.c.created_at, Q.c.id)
        if state is not None:
            if state not in QUESTION_STATES:
                raise LanewayError(
                    f"question state {state!r}: expected one of {', '.join(QUESTION_STATES)}"
                )
            query = query.where(Q.c.state == state)
        if task is not None:
            query = query.where(Q.c.task_id == self._tasks().get(task).id)
        with self.peers.store.read() as conn:
            return [rows.question(r) for r in conn.execute(query).mappings()]


def _answered(found: Question) -> Conflict:
    by = f" by {found.answered_by}" if found.answered_by else ""
    return Conflict(f"question {found.id} is already {found.state}{by}; it cannot be answered")
