from __future__ import annotations

import builtins
import functools
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa

from core import ids, runs
from core.errors import LanewayError, NotFound, RunFenced
from core.model import (
    ACTIVE_SESSION_STATES,
    ITEM_KINDS,
    TERMINAL_STEP_NAMES,
    WAITING_STATES,
    WORKING_STATES,
    Item,
    Session,
    Task,
    TranscriptItem,
)
from core.services.base import Lazy, Service
from core.services.refs import find_task, resolve_id
from core.store import events, prepared, rows
from core.store import tables as t
from core.text import DATA_JSON

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.profiles import ProfileService
    from core.store.database import Store

S = t.task_sessions
ITEMS = t.transcript_items

"""The longest text an `agent.item` event carries (HTTP.md: cut to 4 KiB)."""
IN_DELIVERY: Final = "message_in_delivery"
"""The session metadata key of the message a run took off the queue for its turn:
`{"run_id", "text"}`, until the session's next message is taken (`pop_queued_message`)."""
MAX_ITEMS_PAGE: Final = 1000

# A batch's seqs: the next free one, read under the session row's lock (two writers can never
# both take one number: the lock queues them, SQLite's writers queue on BEGIN IMMEDIATE, and the
# primary key refuses a repeat), then the batch numbered from it; no number is skipped.
_NEXT_SEQ = sa.select(sa.func.coalesce(sa.func.max(ITEMS.c.seq), 0) + 1).where(
    ITEMS.c.session_id == sa.bindparam("session_id", type_=sa.String)
)
_ITEM_COLUMNS: Final = ("session_id", "seq", "run_id", "kind", "text", "data", "at")


@functools.lru_cache(maxsize=64)
def _items_sql(dialect: str, paramstyle: str, quoted: tuple[str, ...], rows: int) -> str:
    """`INSERT INTO transcript_items (...) VALUES (...), (...)` for `rows` rows, as the
    driver's SQL: built once per batch size, never compiled per batch."""
    mark = "?" if paramstyle == "qmark" else "%s"
    one = "(" + ", ".join([mark] * len(quoted)) + ")"
    return f"INSERT INTO {ITEMS.name} ({', '.join(quoted)}) VALUES " + ", ".join([one] * rows)


def _insert_items(
    conn: sa.Connection,
    session_id: str,
    run_id: str | None,
    stamp: str,
    first: int,
    items: Sequence[TranscriptItem],
) -> None:
    """The items as one multi-row INSERT (one per `_ROWS` items), numbered `first`,
    `first + 1`, ... in order."""
    dialect = conn.dialect
    quoted = tuple(dialect.identifier_preparer.quote(c) for c in _ITEM_COLUMNS)
    for at in range(0, len(items), _ROWS):
        chunk = items[at : at + _ROWS]
        values: builtins.list[Any] = []
        for n, item in enumerate(chunk, start=first + at):
            values += (
                session_id,
                n,
                run_id,
                item.kind,
                item.text,
                DATA_JSON(item.data),
                stamp,
            )
        sql = _items_sql(dialect.name, str(dialect.paramstyle), quoted, len(chunk))
        conn.exec_driver_sql(sql, tuple(values))


_ROWS: Final = 500
"""Rows at most in one INSERT: 3,500 parameters, well inside SQLite's and PostgreSQL's limits
(the item writer's batch, core.agents.item_queue.BATCH, is this size)."""


_NEXT = (
    sa.select((sa.func.coalesce(sa.func.max(ITEMS.c.seq), 0) + 1).label("seq"))
    .where(ITEMS.c.session_id == sa.bindparam("session_id", type_=sa.String))
    .subquery("next")
)
_KEPT = ITEMS.alias("kept")
# A turn's prompt, kept once per (run, turn) (issue 41 item 8): sent again by a transient retry or
# by the run re-queued after its worker died, it is not a second row. The INSERT decides, from
# the rows already there (its row count says whether it was kept), never a read before it.
_APPEND_PROMPT = (
    sa.insert(ITEMS)
    .from_select(
        ["session_id", "seq", "run_id", "kind", "text", "data", "at"],
        sa.select(
            sa.bindparam("session_id", type_=sa.String),
            _NEXT.c.seq,
            sa.bindparam("run_id", type_=sa.String),
            sa.bindparam("kind", type_=sa.String),
            sa.bindparam("text", type_=sa.Text),
            sa.bindparam("data", type_=sa.Text),
            sa.bindparam("at", type_=sa.String),
        )
        .select_from(_NEXT)
        .where(
            ~sa.exists().where(
                _KEPT.c.run_id == sa.bindparam("run_id", type_=sa.String),
                _KEPT.c.kind == sa.literal_column("'prompt'"),
                _KEPT.c.data == sa.bindparam("data", type_=sa.Text),
            )
        ),
    )
    .returning(ITEMS.c.seq)
)


# The statements every run makes (core.agents.worker), as prepared driver SQL (core.store.prepared)
_BY_ID = sa.bindparam("session_id", type_=sa.String)
_SET_STATE = (
    sa.update(S)
    .where(S.c.id == _BY_ID)
    .values(state=sa.bindparam("state"), updated_at=sa.bindparam("stamp"))
    .returning(S.c.task_id)
)
# a turn's end: the row as written, which the turn's end reads (no read of its own)
_SET_STATE_ROW = (
    sa.update(S)
    .where(S.c.id == _BY_ID)
    .values(state=sa.bindparam("state"), updated_at=sa.bindparam("stamp"))
    .returning(*S.c)
)
_LOCK_FOR_ITEMS = sa.select(S.c.task_id).where(S.c.id == _BY_ID).with_for_update(key_share=True)
_LOCK_AGENT = sa.select(S).where(S.c.id == _BY_ID).with_for_update(key_share=True)
_SET_AGENT = (
    sa.update(S)
    .where(S.c.id == _BY_ID)
    .values(agent=sa.bindparam("agent"), updated_at=sa.bindparam("stamp"))
    .returning(*S.c)
)
_OF_TASK = (
    sa.select(S)
    .where(S.c.task_id == sa.bindparam("task_id", type_=sa.String))
    .order_by(S.c.started_at, S.c.id)
)
_NOT_PRIMARY = (
    sa.update(S)
    .where(S.c.task_id == sa.bindparam("task_id", type_=sa.String))
    .values(is_primary=False)
)
_INSERT = (
    sa.insert(S)
    .values(
        id=sa.bindparam("session_id"),
        task_id=sa.bindparam("task_id"),
        agent_profile_id=sa.bindparam("agent_profile_id"),
        state="WAITING_FOR_INPUT",
        is_primary=True,
        external=sa.bindparam("external", type_=sa.Boolean),
        metadata="{}",
        started_at=sa.bindparam("stamp"),
        updated_at=sa.bindparam("stamp"),
    )
    .returning(*S.c)
)


class SessionService(Service):
    """Agent sessions. One live session per task: starting one completes the previous."""

    def __init__(self, peers: Peers, *, profiles: Lazy[ProfileService]) -> None:
        super().__init__(peers)
        self._profiles = profiles

    def _task(self, ref: str) -> Task:
        # the plain reader `TaskService.get` is, so the sessions name no task service: the task
        # service names them (a start opens the agent's session), and one arrow is enough
        return find_task(self.peers.store, self.peers.repository, ref)

    def start(self, task: str, *, profile: str | None = None, external: bool = True) -> Session:
        """Open a session for an agent and make it the task's primary one.

        An `external` session belongs to an agent that runs outside laneway (no process); it
        replaces the task's live sessions, which complete. Sessions laneway runs itself (one
        per agent working the task, e.g. each reviewer) stay side by side.
        """
        self._require_writer()
        task_row = self._task(task)
        agent_id = self._profiles().get(profile).id if profile else None
        return open_session(self.peers.store, task_row.id, agent_id, external=external)

    def get(self, session_id: str) -> Session:
        return self.peers.repository.session(session_id)

    def find(self, ref: str) -> Session:
        """A session by its id or a unique suffix of it (at least 6 characters, CLI.md)."""
        with self.peers.store.read() as conn:
            session_id = resolve_id(conn, S.c.id, ref, "session")
        return self.get(session_id)

    def list(self, *, task: str) -> list[Session]:
        return sessions_of(self.peers.store, self._task(task).id)

    def live(self, task_id: str) -> Session | None:
        return self.peers.repository.live_session(task_id)

    def resolve(self, task_id: str, session: str | None) -> Session:
        """The named session (which must belong to the task), else the task's live one."""
        if session is not None:
            found = self.find(session)
            if found.task_id != task_id:
                raise LanewayError(f"session {session} does not belong to task {task_id}")
            return found
        live = self.live(task_id)
        if live is None:
            raise LanewayError(f"task {task_id} has no live session; start one first")
        return live

    def set_state(self, session_id: str, state: str, *, error: str | None = None) -> str | None:
        """The session's state written (an ended one's `completed_at` too); its task's id, None
        when there is no such session. Its row is this transaction's from here."""
        stamp = ids.now()
        values: dict[str, Any] = {"state": state, "updated_at": stamp}
        if error is not None:
            values["error_message"] = error
        if state not in ACTIVE_SESSION_STATES:  # it ended
            values["completed_at"] = stamp
        with self.peers.store.transaction() as uow:
            if error is None and state in ACTIVE_SESSION_STATES:  # a turn's start or end
                task_id = uow.run(
                    _SET_STATE, {"session_id": session_id, "state": state, "stamp": stamp}
                ).scalar()
            else:
                task_id = uow.conn.execute(
                    sa.update(S).where(S.c.id == session_id).values(**values).returning(S.c.task_id)
                ).scalar()
            if task_id is not None:
                events.record(uow, "session.state", task_id, session_id=session_id, state=state)
        return None if task_id is None else str(task_id)

    def set_waiting(self, session_id: str) -> Session | None:
        """A turn's end: the session waits for input (as `set_state`); the session as
        written, read off the write (issue 45: a live turn's end read it again), or None when
        there is no such session."""
        with self.peers.store.transaction() as uow:
            row = uow.run(
                _SET_STATE_ROW,
                {"session_id": session_id, "state": "WAITING_FOR_INPUT", "stamp": ids.now()},
            ).mapping()
            if row is None:
                return None
            session = rows.session(row)
            events.record(
                uow, "session.state", session.task_id, session_id=session_id, state=session.state
            )
        return session

    def turn_starting(self, session_id: str) -> bool:
        """Whether this thread is firing on_turn_start for a turn of the session now (a
        person's message, an agent's own turn start): what that trigger's moves enter must not
        queue the same agent again, or one message would make two turns (issue 38)."""
        from core.services.turns import STARTING

        return STARTING.get() == session_id

    def queue_message(self, session_id: str, text: str) -> Session:
        """A message for the agent, delivered in order when it next takes a turn."""
        return self.record_effect(session_id, queued_messages=[text])

    def send(self, session_id: str, text: str) -> Session:
        """A message for the session's agent, from a person or a script.

        - The session is running a turn (in this process or any other): the message is
          queued, and the process running the turn delivers it, in order, when the turn ends.
        - The session waits for input: the message starts a new turn. An external session's
          agent gets it at once (delivered, the session RUNNING, on_turn_start fired); for a
          session laneway runs, a `user_message` run is queued for a worker to take.

        Messages already queued go first. The state is read and the message queued in one
        transaction, with the session row locked, so a turn ending in another process either
        sees the message or ends before it and leaves the new turn to the queued run.
        """
        self._require_writer()
        if not text.strip():
            raise LanewayError("session send: the message is empty")
        with self.peers.store.transaction() as uow:
            session = self._locked(uow, session_id)
            if session.state not in WORKING_STATES and session.state not in WAITING_STATES:
                raise LanewayError(
                    f"session {session.id} is {session.state}: it takes no more messages; "
                    "start a new session"
                )
            if not session.external and session.state in WAITING_STATES:
                if session.agent_profile_id is None:
                    raise LanewayError(f"session {session.id} has no agent profile to run")
                profile = uow.conn.execute(
                    sa.select(t.agent_profiles.c.id).where(
                        t.agent_profiles.c.id == session.agent_profile_id
                    )
                ).first()
                if profile is None:
                    # removed (`profile remove`): a run for it would wait for ever unclaimed
                    raise LanewayError(
                        f"session {session.id}: its agent profile was removed; "
                        "start a new session with another"
                    )
                task = self._task(session.task_id)
                runs.enqueue(
                    uow,
                    runs.RunRequest(
                        agent_profile_id=session.agent_profile_id,
                        task_id=task.id,
                        workflow_step_id=task.workflow_step_id,
                        reason="user_message",
                    ),
                )
            self._merge(uow, session_id, {"queued_messages": [text]})
            started = session.external and self.start_queued_turn(session.id)
        if started:
            # the turn starts as `TurnService.start_internal` starts it, without naming the
            # turn service (which names this one)
            self.peers.engine.handle_trigger(
                session.task_id, "on_turn_start", session_id=session.id
            )
        return self.get(session.id)

    def request_cancel_retry(self, session_id: str) -> Session:
        """The user cancels a transient retry loop (route R6). The loop may run in any
        process: it watches the session for this request."""
        self._require_writer()
        with self.peers.store.transaction() as uow:
            session = self._locked(uow, session_id)
            if session.state not in WORKING_STATES:
                raise LanewayError(
                    f"session {session.id} is {session.state}: no retry loop to cancel"
                )
            self._merge(uow, session_id, {"cancel_retry_requested": True})
        return self.get(session_id)

    def _locked(self, uow: Any, session_id: str) -> Session:
        """The session, its row held until the transaction ends (FOR UPDATE; SQLite's writers
        are serialised anyway)."""
        row = (
            uow.conn.execute(
                sa.select(S).where(S.c.id == session_id).with_for_update(key_share=True)
            )
            .mappings()
            .first()
        )
        if row is None:
            raise NotFound(f"no session {session_id!r}")
        return rows.session(row)

    def start_queued_turn(self, session_id: str) -> bool:
        """An external session waiting for input with a message queued: the message taken off
        the queue and the session RUNNING, in one transaction with its row locked (the
        caller's, when it has one open). True when this call started the turn (its caller
        fires on_turn_start); False when the session was not waiting (a `send` or a turn's
        end in another process started it first) or nothing was queued."""
        with self.peers.store.transaction() as uow:
            if self._locked(uow, session_id).state not in WAITING_STATES:
                return False
            if self.pop_queued_message(session_id) is None:
                return False
            self.set_state(session_id, "RUNNING")
        return True

    def redeliver(self, session_id: str, run_id: str, held_by: str) -> str | None:
        """The message run `held_by` took off the queue (`IN_DELIVERY`), for run `run_id` to
        deliver again: the same run executed again (its worker killed, stopped by a shutdown)
        or a retry of it (`runs retry`), which holds it from now on. None when no message is
        held by `held_by` any more (a newer one was taken meanwhile)."""
        with self.peers.store.transaction() as uow:
            meta = self._locked(uow, session_id).metadata
            held = meta.get(IN_DELIVERY)
            if not isinstance(held, dict) or held.get("run_id") != held_by:
                return None
            if held_by != run_id:
                self._merge(uow, session_id, {IN_DELIVERY: {"run_id": run_id}})
            return str(held.get("text", ""))

    def pop_queued_message(self, session_id: str, run_id: str | None = None) -> str | None:
        """The session's next queued message, taken off the queue (None: none is queued).

        :param run_id: the run whose turn delivers it. The message stays the run's
            (`IN_DELIVERY`) until another is taken, for a run executed again to deliver it
            again (`redeliver`) instead of finding the queue empty and ending as if its turn
            had happened."""
        with self.peers.store.transaction() as uow:
            raw = uow.conn.execute(
                sa.select(S.c.metadata).where(S.c.id == session_id).with_for_update(key_share=True)
            ).scalar()
            meta: dict[str, Any] = json.loads(raw or "{}")
            queued = list(meta.get("queued_messages") or [])
            if not queued:
                return None
            first = queued.pop(0)
            meta["queued_messages"] = queued
            meta["messages_delivered"] = [*meta.get("messages_delivered", []), first]
            if run_id is not None:
                meta[IN_DELIVERY] = {"run_id": run_id, "text": first}
            uow.conn.execute(
                sa.update(S)
                .where(S.c.id == session_id)
                .values(metadata=rows.dumps(meta), updated_at=ids.now())
            )
        return str(first)

    def record_agent(self, session_id: str, **fields: Any) -> Session:
        """Merge what the agent reported (acp_session_id, modes, mode, config_options, model,
        plan_mode, ...) into the session's `agent`: each field given replaces its value. The
        row is written only when that changes it (read under its lock, compared, then
        written: the lock makes the comparison hold until the write)."""
        with self.peers.store.transaction() as uow:
            before = uow.run(_LOCK_AGENT, {"session_id": session_id}).mapping()
            if before is None:
                raise NotFound(f"no session {session_id!r}")
            had = json.loads(before["agent"])
            agent: dict[str, Any] = {**had, **fields}
            if json.loads(rows.dumps(agent)) == had:
                # the agent reports the same on every turn of a conversation: the row is not
                # written again (issue 45: rewriting it was an eighth of a live turn)
                return rows.session(before)
            row = uow.run(
                _SET_AGENT,
                {"session_id": session_id, "agent": rows.dumps(agent), "stamp": ids.now()},
            ).mapping()
        assert row is not None  # the row is locked above
        return rows.session(row)  # as written, under the row's lock: not read again

    def append_items(
        self,
        session_id: str,
        items: Sequence[TranscriptItem | tuple[str, str, Mapping[str, Any]]],
        *,
        run_id: str | None = None,
        locked: str | None = None,
    ) -> builtins.list[int]:
        """Keep transcript items of the session, in order, in one transaction; each is numbered
        next in the session and is an `agent.item` event of the same transaction. An item is
        a `TranscriptItem` as an agent's protocol made it (already cut to its bounds) or a
        `(kind, text, data)` made into one here: a text longer than MAX_TEXT, or data whose
        JSON is longer than MAX_DATA, is cut and says so. Returns the items' seqs.

        :param locked: the session's task id, when the caller's open transaction has written
            the session's row already (`set_state` at a turn's start): the row is not locked
            and read again."""
        checked: builtins.list[TranscriptItem] = []
        for given in items:
            if isinstance(given, TranscriptItem):
                checked.append(given)
                continue
            kind, text, data = given
            if kind not in ITEM_KINDS:
                raise LanewayError(
                    f"session {session_id}, item kind {kind!r}: expected one of "
                    f"{', '.join(ITEM_KINDS)}"
                )
            checked.append(TranscriptItem(kind, text, data))
        if not checked:
            return []
        seqs: builtins.list[int] = []
        # no board-version read: what an agent says is kept whatever the catalogue holds (a
        # live turn's item writes were two of its four version reads, issue 45); the turn's
        # end, which acts on the board, follows it
        with self.peers.store.transaction(follow_board=False) as uow:
            task_id = locked
            if task_id is None:
                task_id = uow.run(_LOCK_FOR_ITEMS, {"session_id": session_id}).scalar()
            if task_id is None:
                raise NotFound(f"no session {session_id!r}")
            if run_id is not None:
                # a run's transcript is its outcome: written only under its live claim
                refused = runs.fence(uow, run_id, uow.store.liveness.own())
                if refused == "claim_lost":
                    raise RunFenced(run_id, refused)
            stamp = ids.now()
            # The batch's numbers are decided once, under the session row's lock taken above
            # (SQLite's writers queue on BEGIN IMMEDIATE): the next free seq, then the plain
            # items in one multi-row INSERT numbered from it (issue 45 item 2). A run's prompt
            # is kept at most once (its own INSERT decides), so it ends a run of plain items.
            following = int(uow.run(_NEXT_SEQ, {"session_id": session_id}).scalar_one())
            plain: builtins.list[TranscriptItem] = []
            kept: builtins.list[tuple[int, TranscriptItem]] = []

            def write_plain() -> None:
                nonlocal following
                if not plain:
                    return
                _insert_items(uow.conn, session_id, run_id, stamp, following, plain)
                for n, item in enumerate(plain):
                    kept.append((following + n, item))
                following += len(plain)
                plain.clear()

            for item in checked:
                if not (item.kind == "prompt" and run_id is not None):
                    plain.append(item)
                    continue
                write_plain()
                once = uow.run(
                    _APPEND_PROMPT,
                    {
                        "session_id": session_id,
                        "run_id": run_id,
                        "kind": item.kind,
                        "text": item.text,
                        "data": json.dumps(item.data, default=str),
                        "at": stamp,
                    },
                ).scalar()
                if once is None:
                    continue  # this turn's prompt is kept already
                kept.append((int(once), item))
                following = int(once) + 1
            write_plain()
            for seq, item in kept:
                seqs.append(seq)
                events.record(
                    uow,
                    "agent.item",
                    task_id,
                    session_id=session_id,
                    run_id=run_id,
                    seq=seq,
                    kind=item.kind,
                    text=item.event_text,
                )
        return seqs

    def items(
        self, session_id: str, *, run_id: str | None = None, after: int = 0, limit: int = 100
    ) -> builtins.list[Item]:
        """The session's transcript items after seq `after`, in seq order, at most `limit`;
        only the run's when `run_id` is given."""
        if after < 0:
            raise LanewayError(f"transcript after {after}: must be 0 or more")
        if not 1 <= limit <= MAX_ITEMS_PAGE:
            raise LanewayError(f"transcript limit {limit}: must be 1 to {MAX_ITEMS_PAGE}")
        query = (
            sa.select(ITEMS)
            .where(ITEMS.c.session_id == session_id, ITEMS.c.seq > after)
            .order_by(ITEMS.c.seq)
            .limit(limit)
        )
        if run_id is not None:
            query = query.where(ITEMS.c.run_id == run_id)
        with self.peers.store.read() as conn:
            return [rows.item(r) for r in conn.execute(query).mappings()]

    def ended(self, session_ids: Sequence[str]) -> dict[str, str]:
        """Which of `session_ids` have had their conversations ended by the board, and why:
        `deleted` (the session or its task gone), `archived` (its task archived) or
        `terminal` (its task at its workflow's terminal step, `Workflow.terminal_step`).
        One read; the worker ends what it keeps of them (AGENTS.md "Phase 4")."""
        if not session_ids:
            return {}
        tasks, steps = t.tasks, t.workflow_steps
        later = steps.alias("later")
        names = sorted(TERMINAL_STEP_NAMES)
        terminal = sa.and_(
            sa.func.lower(steps.c.name).in_(names),
            ~sa.exists().where(
                later.c.workflow_id == steps.c.workflow_id,
                later.c.position > steps.c.position,
                sa.func.lower(later.c.name).in_(names),
            ),
        )
        query = (
            sa.select(
                S.c.id,
                tasks.c.archived_at.is_not(None).label("archived"),
                sa.case((terminal, True), else_=False).label("terminal"),
            )
            .join(tasks, tasks.c.id == S.c.task_id)
            .outerjoin(steps, steps.c.id == tasks.c.workflow_step_id)
            .where(S.c.id.in_(list(session_ids)))
        )
        with self.peers.store.read() as conn:
            found = {r.id: r for r in conn.execute(query)}
        why: dict[str, str] = {}
        for session_id in session_ids:
            row = found.get(session_id)
            if row is None:
                why[session_id] = "deleted"
            elif row.archived:
                why[session_id] = "archived"
            elif row.terminal:
                why[session_id] = "terminal"
        return why

    def run_items(self, run_id: str) -> builtins.list[Item]:
        """Every transcript item of one run, in the order they were kept."""
        query = (
            sa.select(ITEMS)
            .where(ITEMS.c.run_id == run_id)
            .order_by(ITEMS.c.session_id, ITEMS.c.seq)
        )
        with self.peers.store.read() as conn:
            return [rows.item(r) for r in conn.execute(query).mappings()]

    def record_effect(self, session_id: str, **changes: Any) -> Session:
        """Merge `changes` into the session's metadata; a list value is appended to.

        Session kinds record what they did here (plan mode, session mode, context resets,
        prompts delivered), so the effect is visible and countable.
        """
        with self.peers.store.transaction() as uow:
            self._merge(uow, session_id, changes)
        return self.get(session_id)

    def _merge(self, uow: Any, session_id: str, changes: dict[str, Any]) -> None:
        # FOR UPDATE: two processes merging into one session's metadata must not lose either
        # change (PostgreSQL; SQLite's writers are serialised).
        raw = uow.conn.execute(
            sa.select(S.c.metadata).where(S.c.id == session_id).with_for_update(key_share=True)
        ).scalar()
        if raw is None:
            raise NotFound(f"no session {session_id!r}")
        meta: dict[str, Any] = json.loads(raw)
        # an exec turn's transcript copy, kept here before laneway 38 (the transcript items
        # are the transcript): dropped at the session's next write, so it is read no more
        meta.pop("transcript", None)
        for key, value in changes.items():
            if isinstance(value, list):
                meta[key] = [*meta.get(key, []), *value]
            elif isinstance(value, dict):
                meta[key] = {**meta.get(key, {}), **value}
            else:
                meta[key] = value
        uow.conn.execute(
            sa.update(S)
            .where(S.c.id == session_id)
            .values(metadata=rows.dumps(meta), updated_at=ids.now())
        )


def open_session(store: Store, task_id: str, agent_id: str | None, *, external: bool) -> Session:
    """`SessionService.start` for a caller holding the task's id and the agent profile's id
    (the worker, which has just read both): the session as inserted, nothing read again."""
    session_id = ids.new_id()
    stamp = ids.now()
    with store.transaction() as uow:
        if external:
            # built here, not for the worker's (never external) session: an expression's
            # build is a tenth of a millisecond of every run that opens a session
            live = sa.and_(S.c.task_id == task_id, S.c.state.in_(tuple(ACTIVE_SESSION_STATES)))
            for ended in uow.conn.execute(sa.select(S.c.id).where(live)).scalars():
                events.record(uow, "session.state", task_id, session_id=ended, state="COMPLETED")
            uow.conn.execute(
                sa.update(S)
                .where(live)
                .values(state="COMPLETED", completed_at=stamp, updated_at=stamp)
            )
        uow.run(_NOT_PRIMARY, {"task_id": task_id})
        row = uow.run(
            _INSERT,
            {
                "session_id": session_id,
                "task_id": task_id,
                "agent_profile_id": agent_id,
                "external": external,
                "stamp": stamp,
            },
        ).mapping()
        assert row is not None  # INSERT ... RETURNING
        events.record(
            uow, "session.state", task_id, session_id=session_id, state="WAITING_FOR_INPUT"
        )
    return rows.session(row)


def agent_session(sessions: SessionService, task_id: str, agent_profile_id: str) -> Session:
    """The task's session for an agent: a non-failed one is reused (an ended one is made
    WAITING_FOR_INPUT again), else one is started."""
    for session in reversed(sessions_of(sessions.peers.store, task_id)):
        if session.agent_profile_id == agent_profile_id and session.state != "FAILED":
            if session.state in ACTIVE_SESSION_STATES:
                return session
            sessions.set_state(session.id, "WAITING_FOR_INPUT")
            return sessions.get(session.id)
    return open_session(sessions.peers.store, task_id, agent_profile_id, external=False)


def sessions_of(store: Store, task_id: str) -> list[Session]:
    """The sessions of the task with this id, oldest first (`SessionService.list` without
    resolving the task again)."""
    with store.read() as conn:
        result = prepared.execute(conn, _OF_TASK, {"task_id": task_id}).mappings()
        return [rows.session(r) for r in result]
