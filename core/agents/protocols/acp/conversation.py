"""One turn of an ACP agent: its conversation found or opened, reconciled, then prompted.

A laneway session is one agent conversation (AGENTS.md "A session is one conversation"). The
agent process lives as long as its conversation (`Conversations` keeps it between turns, up to
a bound per worker); when it is gone — the worker restarted, the process died — the stored ACP
session is resumed (`session/resume`) where the agent offers it, else loaded (`session/load`),
else a new conversation opens and the session says `conversation lost`; the session's
`agent.continued_by` says which. When laneway itself ends a conversation (its task archived,
deleted or at its terminal step, the worker's limit of live conversations, the worker stopping)
the agent is sent `session/close` where it offers it (AGENTS.md "Phase 4").

Before each prompt the agent is reconciled with what the workflow wants (`core.agents.desired`):
mode, plan mode, model, config options and a fresh start. What the agent reported is written
back to the session's `agent` (what `session list --json` shows).

Nothing here touches the database itself: the turn's `Record` does, on the turn's own thread
(the ACP loop thread never waits for the database).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs

from core.agents.bounds import item
from core.agents.desired import PLAN_MODE, Desired, with_plan_instruction
from core.agents.item_queue import ItemQueue
from core.agents.protocols.acp.facade import INIT_TIMEOUT, AcpLoop, AgentConnection, McpServer
from core.agents.values import (
    AcpError,
    ElicitationAnswer,
    ElicitationRequest,
    PermissionPolicy,
    PermissionRequest,
    SessionState,
    TranscriptItem,
    TurnEnd,
)
from core.errors import LanewayError
from core.logs import logger
from core.model import AgentProfile

if TYPE_CHECKING:
    from core.agents.sandbox import Room

LIVE_LIMIT: Final = 32
"""Conversations a worker keeps alive between turns; the least recently used one past it ends
(its next turn loads it again, or starts afresh)."""
IDLE_POLL: Final = 0.5


def init_timeout() -> float:
    """How long an agent may take to answer `initialize`: `LANEWAY_ACP_INIT_TIMEOUT` seconds
    on the worker, default 30 (an adapter that starts through npx may need more)."""
    raw = os.environ.get("LANEWAY_ACP_INIT_TIMEOUT", "")
    try:
        value = float(raw) if raw else INIT_TIMEOUT
    except ValueError:
        value = INIT_TIMEOUT
    return value if value > 0 else INIT_TIMEOUT


def live_limit() -> int:
    """Conversations a worker keeps alive between turns: `LANEWAY_ACP_LIVE_CONVERSATIONS` on
    the worker (a positive whole number), default LIVE_LIMIT."""
    raw = os.environ.get("LANEWAY_ACP_LIVE_CONVERSATIONS", "")
    try:
        value = int(raw) if raw else LIVE_LIMIT
    except ValueError:
        value = LIVE_LIMIT
    return value if value > 0 else LIVE_LIMIT


class Record(Protocol):
    """Where a turn's results go (the runtime writes them to the board)."""

    def items(self, items: Sequence[TranscriptItem]) -> None: ...

    def running(self, items: Sequence[TranscriptItem] = ()) -> None:
        """The session RUNNING and `items` kept, in one transaction."""
        ...

    def agent(self, **fields: Any) -> None: ...

    def usage(self, usage: Mapping[str, Any]) -> None: ...

    def warning(self, message: str, **fields: Any) -> None: ...

    def ask(self, request: PermissionRequest) -> str:
        """Put the agent's permission question on the board; the pending request's id."""
        ...

    def await_answer(self, permission_id: str, stop: Callable[[], bool]) -> str | None:
        """Block until a person answers the request (the option id chosen, or None when
        denied without a reject option) or `stop()` says the turn is over (None; the request
        ends cancelled)."""
        ...

    def question(self, request: ElicitationRequest) -> str:
        """Put the agent's form question on the board; the pending question's id."""
        ...

    def await_question(self, question_id: str, stop: Callable[[], bool]) -> ElicitationAnswer:
        """Block until a person answers or declines the question, or `stop()` says the turn
        is over (`cancel`; the question ends cancelled)."""
        ...


@attrs.frozen
class AcpTurn:
    """What one ACP turn needs, already resolved by the runtime."""

    session_id: str
    profile: AgentProfile
    env: Mapping[str, str]
    prompt: str
    cwd: Path
    want: Desired
    reported: Mapping[str, Any]
    """The session's `agent` as stored (the last turn's report)."""
    mcp_servers: Sequence[McpServer] = ()
    room: Room | None = None
    """The sandbox its agent process starts in (None: none)."""
    asking: Callable[[], bool] | None = None
    """Whether the turn's agent waits for a person now (the tool server's `ask`): the idle
    watch counts that wait as no silence."""
    running: bool = True
    """The session is RUNNING already; else the turn sets it, with its prompt when its
    conversation is live (one transaction for both)."""


class Conversations:
    """The agent processes this worker keeps, by laneway session id."""

    def __init__(self, loop: Callable[[], AcpLoop], limit: int | None = None) -> None:
        self._loop = loop
        self._limit = live_limit() if limit is None else limit
        self._live: OrderedDict[str, AgentConnection] = OrderedDict()
        self._run_ids: dict[str, str] = {}  # the LANEWAY_RUN_ID each kept process started with
        self._running: dict[str, AgentConnection] = {}
        self._lock = threading.Lock()
        self._closed = False
        """`close_all(for_good=True)` ran: an agent a turn started meanwhile is stopped as it
        is shown."""

    def start(
        self,
        profile: AgentProfile,
        env: Mapping[str, str],
        cwd: Path,
        room: Room | None = None,
    ) -> AgentConnection:
        """Start the profile's agent (in `room`, when given) and `initialize` it (AcpError when
        that fails; R2 when it cannot start)."""
        policy = PermissionPolicy(
            profile.permissions,  # type: ignore[arg-type]  # checked when the profile was stored
            frozenset(profile.auto_allow),
            frozenset(str(p) for p in room.masked) if room is not None else frozenset(),
        )
        command = profile.command
        if room is not None:
            try:
                command = room.wrap(command, env)
            except LanewayError as exc:
                raise AcpError(TurnEnd("failed", str(exc), route="R2")) from None
            env = room.env(env)
        return self._loop().start_agent(
            command, env=env, cwd=cwd, policy=policy, init_timeout=init_timeout()
        )

    def take(self, session_id: str, run_id: str = "") -> AgentConnection | None:
        """The live process of the conversation, if any and fit for this run's turn.

        A process's environment is fixed when it starts, so one started for an earlier run
        holds a stale LANEWAY_RUN_ID (AGENTS.md "Phase 4": it is the run being executed on
        every turn). When the agent can resume or load its sessions, the conversation loses
        nothing by a restart (`session/resume` or `session/load` continues it), so the process
        is replaced; an agent that can neither is kept, its conversation being worth more, and
        `get_task`'s `run_id` says the run."""
        with self._lock:
            conn = self._live.pop(session_id, None)
            started_for = self._run_ids.pop(session_id, "")
        if conn is not None and not conn.alive:
            conn.close()
            return None
        loadable = conn is not None and conn.info is not None and conn.info.continues
        if conn is not None and started_for != run_id and loadable:
            conn.close()
            return None
        return conn

    def kept(self, session_id: str) -> bool:
        """Whether a live process of the conversation is kept here (`take` may still refuse
        it: the turn then starts another)."""
        with self._lock:
            conn = self._live.get(session_id)
        return conn is not None and conn.alive

    def keep(self, session_id: str, conn: AgentConnection, run_id: str = "") -> None:
        evicted: list[tuple[str, AgentConnection]] = []
        with self._lock:
            closed = self._closed
            if closed:  # shut down during the turn: nothing is kept for a next one
                evicted.append((session_id, conn))
            else:
                self._run_ids[session_id] = run_id
                self._live[session_id] = conn
                self._live.move_to_end(session_id)
            while len(self._live) > self._limit:
                gone, old = self._live.popitem(last=False)
                self._run_ids.pop(gone, None)
                evicted.append((gone, old))
        for gone, old in evicted:
            if closed:
                _ended(gone, old, "shutdown", 0.5)
            else:
                _ended(gone, old, "limit")

    def running(self, session_id: str, conn: AgentConnection | None) -> None:
        with self._lock:
            if conn is None:
                self._running.pop(session_id, None)
            else:
                self._running[session_id] = conn
            late = conn is not None and self._closed
        if late:
            # its agent started while `close_all` ran, which could not see it: its turn is
            # stopped as `close_all` stops the turns it sees
            assert conn is not None
            _stop_running(conn)

    def running_group(self, session_id: str) -> int | None:
        """The process group of the agent running `session_id`'s turn now, if any."""
        with self._lock:
            conn = self._running.get(session_id)
        return conn.pid if conn is not None and conn.alive else None

    def cancel(self, session_id: str, *, grace: float | None = None) -> bool:
        """`session/cancel` of `session_id`'s running turn; its agent's process group is killed
        when the turn has not ended `grace` seconds later (default: the adapter's grace)."""
        with self._lock:
            conn = self._running.get(session_id)
        if conn is None:
            return False
        if grace is None:
            conn.cancel()
        else:
            conn.cancel(grace)
        return True

    def idle(self) -> list[str]:
        """The sessions whose conversations this worker keeps between turns."""
        with self._lock:
            return [s for s in self._live if s not in self._running]

    def end(self, session_id: str, why: str) -> bool:
        """laneway ends the conversation (`why`: archived, deleted, terminal): its agent gets
        `session/close` where it offers it, then stops. False when none was kept here."""
        with self._lock:
            conn = self._live.pop(session_id, None)
            self._run_ids.pop(session_id, None)
        if conn is None:
            return False
        _ended(session_id, conn, why)
        return True

    def close_all(self, *, for_good: bool = False) -> None:
        """Shutdown: every conversation's process group ends, running turns included. An idle
        conversation's agent is sent `session/close` first; a running turn's is cancelled,
        its run going back to the queue and its conversation on with the next worker.
        `for_good` (the worker stops): an agent a turn is starting now is stopped too, as its
        turn shows it, and nothing is kept any more."""
        with self._lock:
            self._closed = self._closed or for_good
            idle = list(self._live.items())
            running = list(self._running.values())
            self._live.clear()
            self._run_ids.clear()
        for conn in running:
            _stop_running(conn)
        # at once, not one after another: each agent may take CLOSE_TIMEOUT to answer
        enders = [
            threading.Thread(
                target=_ended, args=(session_id, conn, "shutdown", 0.5), name="laneway-close"
            )
            for session_id, conn in idle
            if conn not in running
        ]
        for ender in enders:
            ender.start()
        for ender in enders:
            ender.join()


def _stop_running(conn: AgentConnection) -> None:
    """Shutdown of a running turn's agent: cancelled, then stopped half a second later."""
    conn.cancel(grace=0.5)
    conn.close(grace=0.5)


def _ended(session_id: str, conn: AgentConnection, why: str, grace: float = 2.0) -> None:
    """Stop a conversation's agent because laneway ends the conversation: `session/close`
    first where the agent offers it."""
    closed = conn.close(grace, end=True)
    logger.bind(
        session_id=session_id,
        acp_session_id=conn.session.session_id if conn.session else None,
        why=why,
        session_close=closed,
    ).info("conversation ended")


def run_acp_turn(conversations: Conversations, turn: AcpTurn, record: Record) -> TurnEnd:
    """One turn, routed as AGENTS.md "How a turn ends (ACP)". Never raises for what the agent
    did; the process is kept for the next turn unless it is gone or failed us."""
    run_id = turn.env.get("LANEWAY_RUN_ID", "")
    report = _Report(record, turn.reported)
    conn = conversations.take(turn.session_id, run_id)
    running = turn.running
    try:
        if conn is None:
            if not running:
                record.running()  # the board shows it while its agent starts
                running = True
            conn = conversations.start(turn.profile, turn.env, turn.cwd, turn.room)
        _state, prompt = _prepare(conn, turn, record, report)
    except AcpError as exc:
        if conn is not None:
            conn.close()
        if not running:
            record.running()  # as a turn that began: its end routes from RUNNING
        return exc.end
    watch = _IdleWatch(conn, turn.profile.idle_timeout, turn.asking)
    conversations.running(turn.session_id, conn)

    # written by this thread between the agent's updates (`on_idle`), not by a writer thread
    said = ItemQueue(record.items, inline=True)

    def idle() -> None:
        said.flush()
        watch.check()

    def keep(found: TranscriptItem) -> None:
        watch.heard()
        said.put([found])

    def ask(request: PermissionRequest) -> str | None:
        said.flush()  # what it said before asking is on the board beside the question
        return _ask(request, record, conn, watch)

    def elicit(request: ElicitationRequest) -> ElicitationAnswer:
        said.flush()
        return _elicit(request, record, conn, watch)

    try:
        watch.start()
        if running:
            said.put([item("prompt", prompt)])
        else:
            # a live conversation's turn: RUNNING and its prompt in one transaction, written
            # here before the prompt is sent (no hand-off to the item writer for it)
            record.running([item("prompt", prompt)])
        end = conn.prompt(
            prompt,
            on_item=keep,
            on_permission=ask,
            timeout=turn.profile.turn_timeout,
            on_elicit=elicit,
            kept=True,
            on_idle=idle,
            tick=watch.poll,
        )
        said.close()  # everything it said is kept before its turn ends
    except BaseException:
        # the board could not take what it said (its task deleted under it): the agent, in
        # no one's keeping now, must not outlive its turn
        conn.cancel(grace=0.0)
        conn.close(grace=0.5)
        raise
    finally:
        said.stop()
        conversations.running(turn.session_id, None)
    if watch.fired:
        end = TurnEnd("failed", f"agent silent for {turn.profile.idle_timeout:g} s", route="R1")
    _report_usage(end, record, turn.reported, report)
    after = conn.session
    if after is not None:
        report(**_reported(after, prompt != turn.prompt))
    if end.warning:
        record.warning(end.warning, stop_reason=end.stop_reason)
    if conn.alive and end.outcome in ("ok", "cancelled", "transient"):
        conversations.keep(turn.session_id, conn, run_id)
    else:
        conn.close()
    return end


class _Report:
    """What the agent reports, given to the record only when it changes the session's `agent`
    as the turn began with it: a live conversation reports the same at every turn, and each
    write is a transaction (issue 45). The store compares again under the row's lock."""

    def __init__(self, record: Record, known: Mapping[str, Any]) -> None:
        self._record = record
        self._known: dict[str, Any] = dict(known)

    def __call__(self, **fields: Any) -> None:
        merged = {**self._known, **fields}
        try:
            same = json.loads(json.dumps(merged)) == self._known
        except (TypeError, ValueError):  # not plain JSON: the store decides
            same = False
        if not same:
            self._record.agent(**fields)
            self._known = merged


def _prepare(
    conn: AgentConnection, turn: AcpTurn, record: Record, report_to: Callable[..., None]
) -> tuple[SessionState, str]:
    """The conversation open and reconciled; the prompt the agent is sent."""
    want, reported = turn.want, turn.reported
    fresh = want.resets > int(reported.get("resets_applied") or 0)
    stored = reported.get("acp_session_id")
    state = conn.session
    report: dict[str, Any] = {"protocol": "acp", "resets_applied": want.resets}
    if fresh or state is None:
        state = None
        if not fresh and isinstance(stored, str) and stored:
            state, how, reason = _continue(conn, stored, turn)
            report["continued_by"] = how
            if state is None:
                record.warning("conversation lost", acp_session_id=stored, reason=reason)
        if state is None:
            state = conn.new_session(turn.cwd, turn.mcp_servers)
            report["continued_by"] = "new"
            report["original"] = {
                "mode": state.mode,
                "model": state.model,
                "options": {o.id: o.current for o in state.config_options},
            }
            report["mode_before_plan"] = None
    original: Mapping[str, Any] = report.get("original") or reported.get("original") or {}
    # a desired setting the agent lacks is said once per conversation, not at every turn
    warned: set[str] = set() if "original" in report else set(reported.get("warned") or ())

    def lacks(key: str, message: str, **fields: Any) -> None:
        if key not in warned:
            warned.add(key)
            record.warning(message, **fields)

    before_plan = report.get("mode_before_plan", reported.get("mode_before_plan"))
    # mode: plan mode first (the agent's own when it has one), then the mode asked for: the
    # step's session kinds, else the profile's `--mode` (AGENTS.md "Phase 4"), every turn
    target = want.mode or turn.profile.mode
    if want.plan_mode and PLAN_MODE in state.mode_ids:
        if state.mode != PLAN_MODE:
            report["mode_before_plan"] = state.mode
        target = PLAN_MODE
    elif not want.plan_mode and state.mode == PLAN_MODE and before_plan and target is None:
        target = str(before_plan)
        report["mode_before_plan"] = None
    if target is not None and target != state.mode:
        change = conn.set_mode(target)
        if not change.applied:
            lacks(
                f"mode:{target}",
                _lacking("mode", target, change.offered),
                mode=target,
                offered=list(change.offered),
            )
        state = conn.session or state
    # model and options: what configure_session set, or back to what the session began with
    model = want.model or (original.get("model") if want.restore_original else None)
    if model and model != state.model:
        change = conn.set_model(str(model))
        if not change.applied:
            lacks(
                f"model:{model}",
                _lacking("model", model, change.offered),
                model=model,
                offered=list(change.offered),
            )
        state = conn.session or state
    options: Mapping[str, Any] = want.options
    if want.restore_original:
        options = dict(original.get("options") or {})
    for name, value in options.items():
        option = next((o for o in state.config_options if name in (o.id, o.name)), None)
        if option is None:
            offered = tuple(o.id for o in state.config_options)
            lacks(
                f"option:{name}",
                _lacking("config option", name, offered),
                option=name,
                offered=list(offered),
            )
            continue
        wanted: str | bool = value
        if option.type == "boolean" and isinstance(value, str):
            wanted = value.strip().lower() in ("1", "true", "yes", "on")
        if option.current != wanted:
            state = conn.set_config_option(option.id, wanted)
    instructed = want.plan_mode and PLAN_MODE not in state.mode_ids
    report_to(**report, **_reported(state, instructed), warned=sorted(warned))
    return state, with_plan_instruction(turn.prompt) if instructed else turn.prompt


def _continue(
    conn: AgentConnection, stored: str, turn: AcpTurn
) -> tuple[SessionState | None, str, str]:
    """The stored conversation taken up by a new process: `session/resume` where the agent
    offers it (nothing replayed), else `session/load`; the state, how ("resume", "load" or
    "new"), and why it could not be when it could not."""
    reason = "the agent can neither resume nor load it"
    for how, open_ in (("resume", conn.resume_session), ("load", conn.load_session)):
        try:
            state = open_(stored, turn.cwd, turn.mcp_servers)
        except AcpError as exc:
            if exc.end.route == "R3" or not conn.alive:
                raise  # authentication, or an agent gone: the turn fails as it says
            reason = f"session/{how}: {exc.end.message}"
            continue
        if state is not None:
            return state, how, ""
    return None, "new", reason


def _lacking(what: str, wanted: object, offered: tuple[str, ...]) -> str:
    """The WARNING for a desired setting the agent does not offer, naming what it does."""
    return f"{what} {wanted!r} is not offered by the agent; it offers: " + (
        ", ".join(offered) or f"no {what}s"
    )


def _reported(state: SessionState, instructed: bool) -> dict[str, Any]:
    return {
        "acp_session_id": state.session_id,
        "modes": list(state.mode_ids),
        "mode": state.mode,
        "config_options": [
            {"id": o.id, "name": o.name, "current": o.current, "values": list(o.values)}
            for o in state.config_options
        ],
        "model": state.model,
        "models": list(state.models),
        "plan_mode": state.mode == PLAN_MODE or instructed,
    }


def _ask(
    request: PermissionRequest, record: Record, conn: AgentConnection, watch: _IdleWatch
) -> str | None:
    """`--permissions ask`: the question goes to the board and the turn waits for a person's
    answer, from any process. Waiting for a person is not the agent's silence: the idle watch
    is paused meanwhile; the turn's own timeout still runs. A turn cancelled (by a person, a
    timeout, the worker stopping) or an agent gone ends the wait, and the request `cancelled`.
    """
    watch.pause()
    try:
        permission_id = record.ask(request)
        return record.await_answer(
            permission_id, stop=lambda: conn.cancel_requested or not conn.alive
        )
    except Exception as exc:  # noqa: BLE001 - the agent is answered; the turn never hangs
        record.warning(
            "permission request answered cancelled: it could not be put to a person",
            cause=f"{type(exc).__name__}: {exc}",
            tool_call=str(request.tool_call.get("title") or request.tool_kind or ""),
        )
        return None
    finally:
        watch.resume()


def _elicit(
    request: ElicitationRequest, record: Record, conn: AgentConnection, watch: _IdleWatch
) -> ElicitationAnswer:
    """An agent's form question (`elicitation/create`) goes to the board as a question and
    the turn waits for a person, as for a permission request (`_ask`): not the agent's
    silence; a turn that ends meanwhile cancels it."""
    watch.pause()
    try:
        question_id = record.question(request)
        return record.await_question(
            question_id, stop=lambda: conn.cancel_requested or not conn.alive
        )
    except Exception as exc:  # noqa: BLE001 - the agent is answered; the turn never hangs
        record.warning(
            "agent question answered cancel: it could not be put to a person",
            cause=f"{type(exc).__name__}: {exc}",
        )
        return ElicitationAnswer("cancel")
    finally:
        watch.resume()


def _report_usage(
    end: TurnEnd, record: Record, reported: Mapping[str, Any], report_to: Callable[..., None]
) -> None:
    usage = end.usage
    if usage is None:
        return
    found: dict[str, Any] = {}
    if usage.input_tokens is not None:
        found["input_tokens"] = usage.input_tokens
    if usage.output_tokens is not None:
        found["output_tokens"] = usage.output_tokens
    if usage.cost is not None and not math.isfinite(usage.cost):
        found["cost_usd"] = usage.cost  # the record warns of it; what was seen stands
    elif usage.cost is not None:
        # the agent reports the conversation's cost so far: the turn's share is what it added
        seen = float(reported.get("cost_reported") or 0.0)
        found["cost_usd"] = max(0.0, usage.cost - seen)
        report_to(cost_reported=usage.cost)
    if found:
        record.usage(found)


class _IdleWatch:
    """Cancels a turn from which nothing was heard for `limit` seconds (`--idle-timeout`),
    checked by the thread waiting on the turn (`check`, at least every `poll` seconds: the
    facade's `tick`), not by a thread of its own: handing a thread each turn and waking it at
    the turn's end, with the same for the item writer, was a quarter of a live ACP turn's CPU
    (issue 45)."""

    def __init__(
        self, conn: AgentConnection, limit: float, asking: Callable[[], bool] | None = None
    ) -> None:
        self._conn = conn
        self._asking = asking
        self._limit = limit
        self.poll = min(IDLE_POLL, limit)
        self._last = time.monotonic()
        self._next = self._last + self.poll
        self._paused = False
        self.fired = False

    def heard(self) -> None:
        self._last = time.monotonic()

    def pause(self) -> None:
        """A person is being asked: the silence that follows is theirs, not the agent's."""
        self._paused = True

    def resume(self) -> None:
        self._last = time.monotonic()
        self._paused = False

    def start(self) -> None:
        self._last = time.monotonic()
        self._next = self._last + self.poll

    def check(self) -> None:
        """The turn cancelled when the agent has been silent past the limit; looked at once a
        `poll` at most, as the watch's thread did, however often the turn's thread is idle."""
        now = time.monotonic()
        if self.fired or now < self._next:
            return
        self._next = now + self.poll
        if self._paused or (self._asking is not None and self._asking()):
            self._last = now
            return
        if now - self._last > self._limit:
            self.fired = True
            logger.bind(idle_timeout=self._limit).warning("agent silent; cancelling its turn")
            self._conn.cancel()
