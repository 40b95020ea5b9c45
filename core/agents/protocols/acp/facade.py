"""A synchronous ACP client for laneway's threaded runtime.

The asyncio side runs on one dedicated event-loop thread per process (`AcpLoop`), shared by
every agent the process drives. A caller thread (a turn's) calls `AgentConnection`'s blocking
methods; while one runs, the items and permission questions the agent produces are handed to
that same caller thread through a queue, so the caller does its database work on its own
thread and the loop thread never waits for the database, nor the database for the loop.

An agent process is started like an exec agent (core.agents.protocols.exec_process): in a
process group of its own, with a parent-death signal, and with exactly the environment the
caller gives (built by agent_env). The process is forked by the loop thread, which lives as
long as the process, so the parent-death signal comes when the worker dies, not when a turn's
thread ends. Its group is registered with the worker's watchdog (core.agents.watchdog) like an
exec agent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar, cast

import attrs
from acp import PROTOCOL_VERSION, Client, RequestError, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import (
    ClientCapabilities,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    FileSystemCapabilities,
    HttpMcpServer,
    Implementation,
    McpServerStdio,
    SessionConfigOptionBoolean,
    SessionModeState,
    SseMcpServer,
)
from pydantic import ValidationError

from core.agents import watchdog_link
from core.agents.protocols.acp.classify import (
    closing_message_end,
    error_end,
    failed,
    stop_reason_end,
)
from core.agents.protocols.acp.client import Ask, Elicit, LanewayClient
from core.agents.protocols.acp.items import item
from core.agents.protocols.acp.transport import LineTransport, keep_stderr_tail, stderr_text
from core.agents.protocols.exec_process import _parent_death_signal, kill_group
from core.agents.values import (
    AcpError,
    AgentInfo,
    Change,
    ConfigOption,
    ElicitationAnswer,
    ElicitationRequest,
    Mode,
    PermissionPolicy,
    PermissionRequest,
    SessionState,
    TokenUsage,
    TranscriptItem,
    TurnEnd,
)
from core.logs import logger

T = TypeVar("T")
McpServer = McpServerStdio | HttpMcpServer | SseMcpServer
OnItem = Callable[[TranscriptItem], None]
OnPermission = Callable[[PermissionRequest], str | None]
"""Answers a permission question with an option id, or None (cancelled); may block."""
OnElicit = Callable[[ElicitationRequest], ElicitationAnswer]
"""Answers a form question (ACP elicitation); may block."""
OnIdle = Callable[[], None]
"""Called by the thread waiting on a turn whenever it has handled everything the agent sent so
far, and at least every `tick` seconds while nothing comes: where that thread writes what it
was handed together and checks the turn's silence, with no thread of their own (issue 45)."""

DEFAULT_POLICY: Final = PermissionPolicy()
MAX_LINE: Final = 16 * 1024 * 1024
"""The longest stdout line (bytes) an agent may write: one JSON-RPC message."""
INIT_TIMEOUT: Final = 30.0
REQUEST_TIMEOUT: Final = 60.0
# codex-acp starts the MCP servers of a session in the background and answers session/new at
# once, so Codex's first model request could go out before laneway's tool server is up (the
# model is then offered none of its tools). This `_meta` key makes it wait that long for them;
# other agents ignore it.
MCP_STARTUP_WAIT_MS: Final = 30_000


def _session_meta(servers: Sequence[McpServer]) -> dict[str, Any]:
    """The `_meta` of session/new, session/load and session/resume."""
    return {"mcpStartupAwaitTimeoutMs": MCP_STARTUP_WAIT_MS} if servers else {}


CANCEL_GRACE: Final = 10.0
CLOSE_TIMEOUT: Final = 5.0
"""How long an agent may take to answer `session/close` before it is stopped anyway."""
MAX_PENDING: Final = 10_000
"""Items queued for a caller that is not draining them; past that they are dropped, counted."""


class AcpLoop:
    """The event-loop thread of one process; started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                threading.Thread(target=run, name="laneway-acp-loop", daemon=True).start()
                ready.wait()
                self._loop = loop
            return self._loop

    def start_agent(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | Path | None = None,
        policy: PermissionPolicy = DEFAULT_POLICY,
        on_item: OnItem | None = None,
        on_permission: OnPermission | None = None,
        init_timeout: float = INIT_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        max_line: int = MAX_LINE,
    ) -> AgentConnection:
        """Start the agent and `initialize` it; raises AcpError (R2 when it cannot start)."""
        agent = AgentConnection(
            self.loop,
            policy=policy,
            on_item=on_item,
            on_permission=on_permission,
            request_timeout=request_timeout,
        )
        agent.start(tuple(command), env, cwd, init_timeout=init_timeout, max_line=max_line)
        return agent


_shared: AcpLoop | None = None
_shared_lock = threading.Lock()


def shared_loop() -> AcpLoop:
    """The process's ACP loop (one per worker process)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = AcpLoop()
        return _shared


@attrs.define
class _Done:
    """Posted by a call's coroutine when it has finished: the caller stops draining."""


class AgentConnection:
    """One agent process and its current ACP session.

    Blocking methods are for one caller thread at a time; `cancel` and `close` are for any
    thread. Callbacks (`on_item`, `on_permission`) run on the thread inside a blocking method.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        policy: PermissionPolicy,
        on_item: OnItem | None,
        on_permission: OnPermission | None,
        request_timeout: float,
    ) -> None:
        self._loop = loop
        self._events: queue.SimpleQueue[TranscriptItem | Ask | Elicit | _Done] = queue.SimpleQueue()
        self._pending = 0
        self._dropped = 0
        self.client = LanewayClient(self._post, policy)
        self.on_item = on_item
        self.on_permission = on_permission
        self.request_timeout = request_timeout
        self.info: AgentInfo | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._conn: ClientSideConnection | None = None
        self._transport: LineTransport | None = None
        self._stderr = bytearray()
        self._stderr_task: asyncio.Task[None] | None = None
        self._session_id: str | None = None
        self._modes: tuple[Mode, ...] = ()
        self._cancelled = False
        self._prompt_task: asyncio.Future[Any] | None = None
        self._closed = False

    # -- the caller's side of the queue ------------------------------------------------------

    def _post(self, event: TranscriptItem | Ask | Elicit | _Done) -> None:
        if isinstance(event, TranscriptItem):
            if self._pending >= MAX_PENDING:
                self._dropped += 1
                return
            self._pending += 1
        self._events.put(event)

    def _call(
        self,
        coro: Awaitable[T],
        on_item: OnItem | None = None,
        on_permission: OnPermission | None = None,
        on_elicit: OnElicit | None = None,
        on_idle: OnIdle | None = None,
        tick: float | None = None,
    ) -> T:
        on_item = on_item or self.on_item
        on_permission = on_permission or self.on_permission
        done = _Done()

        async def run() -> T:
            try:
                return await coro
            finally:
                self._events.put(done)

        future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        while True:
            if on_idle is not None and self._events.empty():
                on_idle()
            try:
                event = self._events.get(timeout=tick)
            except queue.Empty:
                continue  # a tick: `on_idle` again
            if event is done:
                break
            if isinstance(event, TranscriptItem):
                self._pending -= 1
                if on_item is not None:
                    on_item(event)
                if self._dropped and self._pending == 0:
                    dropped, self._dropped = self._dropped, 0
                    if on_item is not None:
                        on_item(item("log", f"{dropped} transcript items dropped: none read them"))
            elif isinstance(event, Ask):
                answer = on_permission(event.request) if on_permission is not None else None
                self._loop.call_soon_threadsafe(_settle, event.answer, answer)
            elif isinstance(event, Elicit):
                form = on_elicit(event.request) if on_elicit else ElicitationAnswer("cancel")
                self._loop.call_soon_threadsafe(_settle, event.answer, form)
        return future.result()

    # -- starting ---------------------------------------------------------------------------

    def start(
        self,
        command: tuple[str, ...],
        env: Mapping[str, str],
        cwd: str | Path | None,
        *,
        init_timeout: float,
        max_line: int,
    ) -> None:
        self._call(self._start(command, env, cwd, init_timeout, max_line))

    async def _start(
        self,
        command: tuple[str, ...],
        env: Mapping[str, str],
        cwd: str | Path | None,
        init_timeout: float,
        max_line: int,
    ) -> None:
        if not command:
            raise AcpError(TurnEnd("failed", "the agent profile has no command", route="R2"))
        watchdog_link.announce()
        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                # Exactly `env`: the caller built it from agent_env's documented base.
                env=dict(env),
                cwd=cwd,
                limit=max_line,
                process_group=0,
                preexec_fn=_parent_death_signal(),  # one syscall: safe between fork and exec
            )
        except OSError as exc:
            watchdog_link.track(None)
            message = f"cannot start {command[0]!r}: {exc.strerror or exc}"
            raise AcpError(TurnEnd("failed", message, route="R2")) from None
        watchdog_link.track(proc.pid)
        assert proc.stdout is not None
        assert proc.stdin is not None
        assert proc.stderr is not None
        self._proc = proc
        self._stderr_task = asyncio.create_task(keep_stderr_tail(proc.stderr, self._stderr))
        self._transport = LineTransport(proc.stdout, proc.stdin, max_line=max_line)
        # LanewayClient serves what laneway serves; the SDK answers the rest method-not-found.
        # the unstable protocol: elicitation/create (a question to a person) is part of it
        self._conn = ClientSideConnection(
            cast(Client, self.client), self._transport, use_unstable_protocol=True
        )
        capabilities = ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
            terminal=False,
            # form questions only: laneway sends no one to a URL
            elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()),
        )
        answer = await self._guard(
            "initialize",
            self._conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=capabilities,
                client_info=Implementation(name="laneway", version="0.1.0"),
            ),
            init_timeout,
        )
        caps = answer.agent_capabilities
        sessions = caps.session_capabilities if caps else None
        self.info = AgentInfo(
            protocol_version=answer.protocol_version,
            name=answer.agent_info.name if answer.agent_info else None,
            version=answer.agent_info.version if answer.agent_info else None,
            load_session=bool(caps and caps.load_session),
            auth_methods=tuple(m.id for m in answer.auth_methods or ()),
            resume_session=bool(sessions and sessions.resume is not None),
            close_session=bool(sessions and sessions.close is not None),
        )

    async def _guard(self, phase: str, coro: Awaitable[T], timeout: float | None) -> T:
        """Await one request, routing every way it can fail into an AcpError."""
        try:
            return await asyncio.wait_for(coro, timeout)
        except TimeoutError:
            await self._kill()
            raise AcpError(
                failed(f"the agent did not answer {phase} within {timeout:g} s", self.stderr_tail)
            ) from None
        except RequestError as exc:
            raise AcpError(error_end(exc, stderr_tail=self.stderr_tail)) from None
        except ConnectionError:
            raise AcpError(await self._dead(phase)) from None
        except ValidationError as exc:
            first = exc.errors()[0]["msg"] if exc.errors() else str(exc)
            raise AcpError(failed(f"the agent's answer to {phase} is malformed: {first}")) from None

    async def _dead(self, phase: str) -> TurnEnd:
        """The route of a connection that ended under a request: the agent broke or exited."""
        assert self._proc is not None
        broke = self._transport.failure if self._transport else None
        if broke is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._proc.wait(), 2.0)
        await self._kill()
        if self._stderr_task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)
        if broke is None:
            status = self._proc.returncode
            if phase == "initialize" and status is not None:
                # it died before saying a word: its stderr is all the reason there is
                broke = f"the agent exited at start (exit status {status})"
            else:
                broke = f"the agent closed its stdout during {phase}" + (
                    f" (exit status {status})" if status is not None else ""
                )
        return failed(broke, self.stderr_tail)

    async def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        kill_group(proc.pid)  # the agent and whatever it started
        watchdog_link.untrack(proc.pid)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 5.0)

    # -- what the agent reported -------------------------------------------------------------

    @property
    def stderr_tail(self) -> str:
        """What the agent wrote on stderr lately (the last STDERR_KEEP bytes), as text."""
        return stderr_text(self._stderr)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None and not self._closed

    @property
    def cancel_requested(self) -> bool:
        """The running turn was cancelled (`cancel`, or its turn timeout): a caller waiting
        on the agent's behalf stops waiting."""
        return self._cancelled

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def session(self) -> SessionState | None:
        if self._session_id is None:
            return None
        options = tuple(_option(o) for o in self.client.config_options or ())
        models = self._transport.models if self._transport else None
        offered: tuple[str, ...] = ()
        model: str | None = None
        model_option = next((o for o in options if o.category == "model"), None)
        if model_option is not None:
            offered = model_option.values
            model = str(model_option.current)
        elif models:
            offered = tuple(
                str(m.get("modelId"))
                for m in models.get("availableModels") or ()
                if isinstance(m, dict)
            )
            current = models.get("currentModelId")
            model = current if isinstance(current, str) else None
        modes, mode = self._modes, self.client.mode
        mode_option = _mode_option(options) if not modes else None
        if mode_option is not None:
            # agents that offer their modes only as a config option of category `mode`
            # (OpenCode 1.18): the same modes, set through that option
            modes = tuple(Mode(v, v) for v in mode_option.values)
            mode = str(mode_option.current)
        return SessionState(self._session_id, modes, mode, options, offered, model)

    def _take_session(self, session_id: str, modes: SessionModeState | None, options: Any) -> None:
        self._session_id = session_id
        self._modes = tuple(Mode(m.id, m.name) for m in modes.available_modes) if modes else ()
        self.client.mode = modes.current_mode_id if modes else None
        self.client.config_options = list(options) if options else None

    # -- sessions ---------------------------------------------------------------------------

    def new_session(self, cwd: str | Path, mcp_servers: Sequence[McpServer] = ()) -> SessionState:
        """`session/new` in `cwd` (absolute) with the caller's MCP servers."""
        return self._call(self._new(Path(cwd), list(mcp_servers)))

    async def _new(self, cwd: Path, servers: list[McpServer]) -> SessionState:
        assert self._conn is not None
        self.client.cwd = cwd
        answer = await self._guard(
            "session/new",
            self._conn.new_session(
                cwd=str(cwd),
                mcp_servers=servers,  # type: ignore[arg-type]
                **_session_meta(servers),
            ),
            self.request_timeout,
        )
        self._take_session(answer.session_id, answer.modes, answer.config_options)
        state = self.session
        assert state is not None
        return state

    def load_session(
        self, session_id: str, cwd: str | Path, mcp_servers: Sequence[McpServer] = ()
    ) -> SessionState | None:
        """`session/load` of a stored conversation; None when the agent does not offer it.

        The agent replays the conversation as updates; they are not transcript again."""
        if self.info is None or not self.info.load_session:
            return None
        return self._call(self._load(session_id, Path(cwd), list(mcp_servers)))

    async def _load(self, session_id: str, cwd: Path, servers: list[McpServer]) -> SessionState:
        assert self._conn is not None
        self.client.cwd = cwd
        self.client.replaying = True
        try:
            answer = await self._guard(
                "session/load",
                self._conn.load_session(
                    cwd=str(cwd),
                    session_id=session_id,
                    mcp_servers=servers,  # type: ignore[arg-type]
                    **_session_meta(servers),
                ),
                self.request_timeout,
            )
            await self.client.replay_done()
        finally:
            self.client.replaying = False
        self._take_session(session_id, answer.modes, answer.config_options)
        state = self.session
        assert state is not None
        return state

    def resume_session(
        self, session_id: str, cwd: str | Path, mcp_servers: Sequence[McpServer] = ()
    ) -> SessionState | None:
        """`session/resume` of a stored conversation; None when the agent does not offer it.

        Unlike `session/load` the agent replays nothing: the conversation goes on as it was."""
        if self.info is None or not self.info.resume_session:
            return None
        return self._call(self._resume(session_id, Path(cwd), list(mcp_servers)))

    async def _resume(self, session_id: str, cwd: Path, servers: list[McpServer]) -> SessionState:
        assert self._conn is not None
        self.client.cwd = cwd
        answer = await self._guard(
            "session/resume",
            self._conn.resume_session(
                cwd=str(cwd),
                session_id=session_id,
                mcp_servers=servers,  # type: ignore[arg-type]
                **_session_meta(servers),
            ),
            self.request_timeout,
        )
        self._take_session(session_id, answer.modes, answer.config_options)
        state = self.session
        assert state is not None
        return state

    def set_mode(self, mode_id: str) -> Change:
        """`session/set_mode` when the agent offers `mode_id` (its config option of category
        `mode` when it offers its modes only that way); else nothing is sent and the
        answer names the modes it offers (the caller's WARNING)."""
        state = self._need_session()
        if mode_id not in state.mode_ids:
            return Change(False, state.mode, state.mode_ids)
        option = _mode_option(state.config_options) if not self._modes else None
        if option is not None:
            after = self.set_config_option(option.id, mode_id)
            return Change(True, after.mode, after.mode_ids)
        self._call(self._set_mode(state.session_id, mode_id))
        return Change(True, mode_id, state.mode_ids)

    async def _set_mode(self, session_id: str, mode_id: str) -> None:
        assert self._conn is not None
        await self._guard(
            "session/set_mode",
            self._conn.set_session_mode(session_id=session_id, mode_id=mode_id),
            self.request_timeout,
        )
        self.client.mode = mode_id

    def set_config_option(self, config_id: str, value: str | bool) -> SessionState:
        """`session/set_config_option`; the agent answers with every option's value."""
        state = self._need_session()
        self._call(self._set_option(state.session_id, config_id, value))
        after = self.session
        assert after is not None
        return after

    async def _set_option(self, session_id: str, config_id: str, value: str | bool) -> None:
        assert self._conn is not None
        answer = await self._guard(
            "session/set_config_option",
            self._conn.set_config_option(config_id=config_id, session_id=session_id, value=value),
            self.request_timeout,
        )
        self.client.config_options = list(answer.config_options)

    def set_model(self, model_id: str) -> Change:
        """The model through the agent's model option: its config option of category `model`,
        else `session/set_model` where it offers models that way; else nothing is applied."""
        state = self._need_session()
        option = next((o for o in state.config_options if o.category == "model"), None)
        if model_id not in state.models:
            return Change(False, state.model, state.models)
        if option is not None:
            after = self.set_config_option(option.id, model_id)
        else:
            self._call(self._set_model(state.session_id, model_id))
            after = self._need_session()
        return Change(True, after.model, after.models)

    async def _set_model(self, session_id: str, model_id: str) -> None:
        assert self._conn is not None
        assert self._transport is not None
        # The SDK has no method for this unstable request: sent as the adapters expect it.
        raw = self._conn._conn.send_request(
            "session/set_model", {"sessionId": session_id, "modelId": model_id}
        )
        await self._guard("session/set_model", raw, self.request_timeout)
        if self._transport.models is not None:
            self._transport.models = {**self._transport.models, "currentModelId": model_id}

    def _need_session(self) -> SessionState:
        state = self.session
        if state is None:
            raise AcpError(failed("no ACP session is open: session/new or session/load first"))
        return state

    # -- turns ------------------------------------------------------------------------------

    def prompt(
        self,
        text: str,
        *,
        on_item: OnItem | None = None,
        on_permission: OnPermission | None = None,
        timeout: float | None = None,
        on_elicit: OnElicit | None = None,
        kept: bool = False,
        on_idle: OnIdle | None = None,
        tick: float | None = None,
    ) -> TurnEnd:
        """One turn: `session/prompt` with `text`, every update handed to `on_item` (the
        prompt first, unless the caller `kept` it already), until the agent answers; routed as
        AGENTS.md says. Never raises for what the agent did. `on_idle` (see `OnIdle`) is
        called on the caller's thread between updates, and every `tick` seconds."""
        state = self._need_session()
        deliver = on_item or self.on_item
        if deliver is not None and not kept:
            deliver(item("prompt", text))
        self._cancelled = False
        self.client.closing = ""
        return self._call(
            self._prompt(state.session_id, text, timeout),
            on_item,
            on_permission,
            on_elicit,
            on_idle,
            tick,
        )

    async def _prompt(self, session_id: str, text: str, timeout: float | None) -> TurnEnd:
        assert self._conn is not None
        task = asyncio.ensure_future(
            self._conn.prompt(session_id=session_id, prompt=[text_block(text)])
        )
        self._prompt_task = task
        try:
            try:
                answer = await asyncio.wait_for(asyncio.shield(task), timeout)
            except TimeoutError:
                await self._cancel(CANCEL_GRACE)
                task.cancel()
                return failed(f"turn timed out after {timeout:g} s", self.stderr_tail)
            except RequestError as exc:
                return error_end(exc, stderr_tail=self.stderr_tail)
            except (ConnectionError, asyncio.CancelledError):
                if self._cancelled:
                    await self._kill()  # the agent ignored session/cancel: its group is killed
                    return TurnEnd("cancelled", "the turn was cancelled")
                return await self._dead("session/prompt")
            except ValidationError as exc:
                first = exc.errors()[0]["msg"] if exc.errors() else str(exc)
                return failed(f"the agent's answer to session/prompt is malformed: {first}")
        finally:
            self._prompt_task = None
            self.client.flush()
        usage = self.client.usage
        if answer.usage is not None:
            u = answer.usage
            usage = attrs.evolve(
                usage or TokenUsage(),
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                total_tokens=u.total_tokens,
            )
            self.client.usage = usage  # on the run (its `usage`), not a blank transcript row
        end = stop_reason_end(answer.stop_reason, cancelled=self._cancelled, usage=usage)
        end = closing_message_end(end, self.client.closing)
        bad = self._transport.bad_usage if self._transport is not None else None
        if bad is not None:
            self._transport.bad_usage = None  # type: ignore[union-attr]  # just read
            said = f"agent usage not recorded: not finite, non-negative numbers: {bad}"
            end = attrs.evolve(end, warning=f"{end.warning}; {said}" if end.warning else said)
        return end

    def cancel(self, grace: float | None = None) -> None:
        """`session/cancel` of the running turn (any thread); the process group is killed when
        the agent has not ended the turn `grace` seconds later (default CANCEL_GRACE, read
        now). The turn ends `cancelled`."""
        self._cancelled = True
        wait = CANCEL_GRACE if grace is None else grace
        asyncio.run_coroutine_threadsafe(self._cancel(wait), self._loop)

    async def _cancel(self, grace: float) -> None:
        self._cancelled = True
        self.client.cancel_asks()
        task = self._prompt_task
        if self._conn is not None and self._session_id is not None:
            with contextlib.suppress(Exception):
                await self._conn.cancel(session_id=self._session_id)
        if task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), grace)
            if not task.done():
                await self._kill()

    def close(self, grace: float = 2.0, *, end: bool = False) -> bool:
        """Stop the agent: close its stdin, then kill its process group. With `end`, laneway
        is ending the conversation itself (AGENTS.md "Phase 4"): the agent is sent
        `session/close` first when it offers it. Whether `session/close` was answered."""
        if self._closed:
            return False
        self._closed = True
        return asyncio.run_coroutine_threadsafe(self._close(grace, end), self._loop).result(
            grace + CLOSE_TIMEOUT + 10
        )

    async def _close(self, grace: float, end: bool) -> bool:
        closed = False
        if end and self._can_close():
            closed = await self._close_session()
        proc = self._proc
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), grace)
        await self._kill()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
        if self._stderr_task is not None:
            self._stderr_task.cancel()
        return closed

    def _can_close(self) -> bool:
        return (
            self.info is not None
            and self.info.close_session
            and self._conn is not None
            and self._session_id is not None
            and self._proc is not None
            and self._proc.returncode is None
            and self._prompt_task is None
        )

    async def _close_session(self) -> bool:
        """`session/close` of the open session, waited for at most CLOSE_TIMEOUT: the agent
        frees what it holds for it; one that does not answer is stopped all the same."""
        assert self._conn is not None
        assert self._session_id is not None
        try:
            await asyncio.wait_for(
                self._conn.close_session(session_id=self._session_id), CLOSE_TIMEOUT
            )
        except Exception as exc:  # noqa: BLE001 - the process is stopped next whatever it says
            logger.bind(acp_session_id=self._session_id, cause=f"{type(exc).__name__}: {exc}").info(
                "session/close not answered; the agent is stopped"
            )
            return False
        return True


def _settle(answer: asyncio.Future[T], value: T) -> None:
    if not answer.done():
        answer.set_result(value)


def _mode_option(options: Sequence[ConfigOption]) -> ConfigOption | None:
    return next((o for o in options if o.category == "mode" and o.type == "select"), None)


def _option(option: Any) -> ConfigOption:
    category = option.category if isinstance(option.category, str) else None
    if isinstance(option, SessionConfigOptionBoolean):
        return ConfigOption(option.id, option.name, "boolean", option.current_value, (), category)
    values: list[str] = []
    for entry in option.options:
        values.extend(o.value for o in getattr(entry, "options", None) or [entry])
    return ConfigOption(
        option.id, option.name, "select", option.current_value, tuple(values), category
    )
