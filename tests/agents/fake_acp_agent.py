"""A scriptable ACP agent on the SDK's agent side, for driving laneway's ACP client.

The script is JSON, from the file named by FAKE_ACP_SCRIPT_FILE or inline in FAKE_ACP_SCRIPT:

    {"init": "ok" | "hang" | "garbage" | "huge_line" | "exit" | "auth_error",
     "new": "ok" | "auth_error", "load": "ok" | "auth_error",
     "modes": ["default", "plan"], "mode": "default",
     "load_session": false,
     "replay": "late",   # session/load answers first and replays the conversation after
     "resume_session": false, "close_session": false,   # sessionCapabilities.resume / .close
     "resume": "ok" | "error",                          # session/resume's answer
     "log": "FILE",   # one JSON line per session request: {"method", "session_id", "pid"}
     "config_options": [{"id", "name", "values": [...], "current", "category"?}],
     "state_dir": "DIR",   # conversations kept here, so session/load works in a new process
     "turns": [[STEP, ...], ...]}   # the n-th prompt of the process runs turns[n] (the last
                                    # one repeats); without turns a prompt is echoed
STEP is one of {"message": T}, {"thought": T}, {"tool_call": {"id", "title", "kind"}},
{"tool_update": {"id", "status"}},
{"chunks": [T, ...], "kind": "message"|"thought", "message_id": ID, "pause": S} (streamed: one
update per chunk, `pause` seconds apart, each carrying `messageId` ID when given),
{"plan": [T, ...]}, {"permission": {"kind", "title", "meta", "id"?}} (a null title: none)
(its answer becomes a message `permission: OPTION-ID|cancelled`), {"read": PATH},
{"write": PATH, "content": T}, {"terminal": true}, {"usage": {"used", "size", "cost"}},
{"sleep": S}, {"wait_cancel": true}, {"garbage": T}, {"huge_line": MB}, {"stderr": T},
{"exit": CODE}, {"close_stdout": true}, {"env": true} (a message `env: [NAMES]`),
{"env_value": NAME} (a message `NAME=VALUE`),
{"python": CODE} (runs CODE in this process, on a thread, with `prompt` - the turn's prompt
text - and `servers` - the session's mcpServers as {name, command, args, env} - in scope; a
message `python: RESULT` of the variable `result` it sets),
{"cwd": true} (a message `cwd: SESSION CWD (process: ITS OWN CWD)`),
{"state": true} (a message `state: mode=M options={ID: CURRENT, ...}`: what the agent is set to),
{"elicit": {"message", "schema" (JSON Schema of the form), "url"?}} (elicitation/create; says
`elicit: ACTION CONTENT-JSON`), {"error": {"code", "message", "data"?}},
{"mcp": {"tool": NAME, "args": {...}}} (starts the stdio MCP server `laneway` from the
mcpServers of the session's session/new or session/load with the MCP client SDK, calls the
tool, and says `mcp NAME: RESULT TEXT`, or `mcp NAME error: TEXT` when the call fails or no
`laneway` server was given; with "beat": true a thought every 0.2 s while the server starts),
{"stop": REASON} (ends the turn; default end_turn). A request's error answer (read, write,
terminal) becomes a message `error CODE: MESSAGE`. Each prompt's text is also echoed as
`echo: TEXT (previous: P)`.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import select
import sys
from pathlib import Path
from typing import Any

import pydantic

# The SDK's ~800 pydantic models each build their validator as their class is made: most of
# this double's start (0.5 s of CPU), and the suite starts it ~200 times. Deferred, a model
# builds it when first used, validating exactly as before (0.09 s less a start).
pydantic.BaseModel.model_config["defer_build"] = True

from acp import (  # noqa: E402 - after the deferral, which applies to classes made later
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    SetSessionModeResponse,
    plan_entry,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
)
from acp.interfaces import Client  # noqa: E402
from acp.schema import (  # noqa: E402
    AgentCapabilities,
    AgentMessageChunk,
    AgentThoughtChunk,
    CloseSessionResponse,
    Cost,
    CurrentModeUpdate,
    ElicitationFormSessionMode,
    ElicitationSchema,
    ElicitationUrlSessionMode,
    Implementation,
    PermissionOption,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    TextContentBlock,
    ToolCallUpdate,
    UsageUpdate,
)


def _script() -> dict[str, Any]:
    path = os.environ.get("FAKE_ACP_SCRIPT_FILE")
    if path:
        return dict(json.loads(Path(path).read_text()))
    return dict(json.loads(os.environ.get("FAKE_ACP_SCRIPT", "{}")))


def _raw(data: bytes) -> None:
    """Write to stdout behind the SDK's back (what a broken agent does); the SDK made the
    pipe non-blocking, so a full pipe is waited out here."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(1, view) :]
        except BlockingIOError:
            select.select([], [1], [], 1.0)


class FakeAgent(Agent):
    def __init__(self, script: dict[str, Any]) -> None:
        self.script = script
        self.client: Client | None = None
        self.prompts = 0
        self.cancelled: dict[str, asyncio.Event] = {}
        self.modes = list(script.get("modes", ["default", "plan"]))
        self.mode = script.get("mode", self.modes[0] if self.modes else None)
        self.options = {o["id"]: dict(o) for o in script.get("config_options", [])}
        self.history: dict[str, list[str]] = {}
        self.mcp_servers: dict[str, list[Any]] = {}
        self.cwd: dict[str, str] = {}
        self.late: asyncio.Task[None] | None = None  # a replay sent after session/load answered

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    def _log(self, method: str, session_id: str | None) -> None:
        path = self.script.get("log")
        if path:
            line = {"method": method, "session_id": session_id, "pid": os.getpid()}
            with open(path, "a") as file:
                file.write(json.dumps(line) + "\n")

    # -- the conversation, kept on disk when state_dir is given --------------------------

    def _store(self, session_id: str) -> Path | None:
        folder = self.script.get("state_dir")
        return Path(folder, f"{session_id}.json") if folder else None

    def _save(self, session_id: str) -> None:
        path = self._store(session_id)
        if path is not None:
            path.write_text(json.dumps(self.history[session_id]))

    def _mode_state(self) -> SessionModeState | None:
        if not self.modes:
            return None
        return SessionModeState(
            current_mode_id=self.mode,
            available_modes=[SessionMode(id=m, name=m.title()) for m in self.modes],
        )

    def _config(self) -> list[Any]:
        return [
            SessionConfigOptionSelect(
                id=o["id"],
                name=o.get("name", o["id"]),
                type="select",
                current_value=o["current"],
                options=[SessionConfigSelectOption(value=v, name=v) for v in o["values"]],
                category=o.get("category"),
            )
            for o in self.options.values()
        ]

    # -- the protocol --------------------------------------------------------------------

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        self.client_capabilities = kwargs.get("client_capabilities")
        behaviour = self.script.get("init", "ok")
        if behaviour == "hang":
            await asyncio.Event().wait()
        if behaviour == "garbage":
            _raw(b"this is not JSON-RPC\n")
            await asyncio.Event().wait()
        if behaviour == "huge_line":
            chunk = b"x" * (1024 * 1024)
            for _ in range(int(self.script.get("huge_mb", 100))):
                _raw(chunk)
            await asyncio.Event().wait()
        if behaviour == "exit":
            sys.stderr.write("fake agent: giving up at initialize\n")
            sys.stderr.flush()
            os._exit(3)
        if behaviour == "auth_error":
            raise RequestError.auth_required({"message": "run `fake login` first"})
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=bool(self.script.get("load_session", False)),
                session_capabilities=SessionCapabilities(
                    resume=SessionResumeCapabilities()
                    if self.script.get("resume_session")
                    else None,
                    close=SessionCloseCapabilities() if self.script.get("close_session") else None,
                ),
            ),
            agent_info=Implementation(name="fake-acp-agent", version="1.0"),
            auth_methods=[],
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        if self.script.get("new") == "auth_error":
            raise RequestError(-32603, "Internal error", {"details": "HTTP 401 Unauthorized"})
        session_id = f"fake-{os.getpid()}-{len(self.history)}"
        self.history[session_id] = []
        self.mcp_servers[session_id] = list(kwargs.get("mcp_servers") or [])
        self.cwd[session_id] = cwd
        self._save(session_id)
        self._log("session/new", session_id)
        return NewSessionResponse(
            session_id=session_id, modes=self._mode_state(), config_options=self._config() or None
        )

    async def load_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> LoadSessionResponse | None:
        if self.script.get("load") == "auth_error":
            raise RequestError.auth_required({"message": "session expired: log in again"})
        path = self._store(session_id)
        if path is None or not path.exists():
            raise RequestError.resource_not_found(session_id)
        self.history[session_id] = list(json.loads(path.read_text()))
        self.mcp_servers[session_id] = list(kwargs.get("mcp_servers") or [])
        self.cwd[session_id] = cwd
        assert self.client is not None
        if self.script.get("replay") == "late":
            # as Gemini CLI 0.61: the answer first, the replay streamed after it
            self.late = asyncio.create_task(self._replay(session_id, pause=0.001))
        else:
            await self._replay(session_id)  # ACP: load replays the conversation, then answers
        self._log("session/load", session_id)
        return LoadSessionResponse(modes=self._mode_state(), config_options=self._config() or None)

    async def _replay(self, session_id: str, pause: float = 0.0) -> None:
        assert self.client is not None
        for text in self.history[session_id]:
            await asyncio.sleep(pause)
            await self.client.session_update(session_id, update_agent_message_text(text))

    async def resume_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> ResumeSessionResponse:
        """ACP session/resume: the stored conversation goes on, nothing replayed."""
        path = self._store(session_id)
        if self.script.get("resume") == "error" or path is None or not path.exists():
            self._log("session/resume:failed", session_id)
            raise RequestError.resource_not_found(session_id)
        self.history[session_id] = list(json.loads(path.read_text()))
        self.mcp_servers[session_id] = list(kwargs.get("mcp_servers") or [])
        self.cwd[session_id] = cwd
        self._log("session/resume", session_id)
        return ResumeSessionResponse(
            modes=self._mode_state(), config_options=self._config() or None
        )

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        self._log("session/close", session_id)
        self.history.pop(session_id, None)
        return CloseSessionResponse()

    async def set_session_mode(
        self, mode_id: str, session_id: str, **kwargs: Any
    ) -> SetSessionModeResponse | None:
        if mode_id not in self.modes:
            raise RequestError.invalid_params({"details": f"no mode {mode_id}"})
        self.mode = mode_id
        assert self.client is not None
        await self.client.session_update(
            session_id,
            CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode_id),
        )
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse | None:
        option = self.options.get(config_id)
        if option is None or value not in option["values"]:
            raise RequestError.invalid_params({"details": f"no {config_id}={value}"})
        option["current"] = value
        return SetSessionConfigOptionResponse(config_options=self._config())

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        assert self.client is not None
        text = " ".join(getattr(b, "text", "") for b in prompt)
        history = self.history.setdefault(session_id, [])
        turns = self.script.get("turns") or [[]]
        steps = turns[min(self.prompts, len(turns) - 1)]
        self.prompts += 1
        self.cancelled[session_id] = asyncio.Event()
        previous = history[-1] if history else None
        history.append(text)
        self.prompt_text = text
        self._save(session_id)
        self._log("session/prompt", session_id)
        await self.client.session_update(
            session_id, update_agent_message_text(f"echo: {text} (previous: {previous})")
        )
        stop = "end_turn"
        for step in steps:
            result = await self._step(session_id, step)
            if result is not None:
                stop = result
                break
        return PromptResponse(stop_reason=stop)

    async def _say(self, session_id: str, text: str) -> None:
        assert self.client is not None
        await self.client.session_update(session_id, update_agent_message_text(text))

    async def _step(self, session_id: str, step: dict[str, Any]) -> str | None:
        client = self.client
        assert client is not None
        if "message" in step:
            await self._say(session_id, step["message"])
        elif "thought" in step:
            await client.session_update(session_id, update_agent_thought_text(step["thought"]))
        elif "chunks" in step:
            kind = AgentThoughtChunk if step.get("kind") == "thought" else AgentMessageChunk
            update = "agent_thought_chunk" if kind is AgentThoughtChunk else "agent_message_chunk"
            for n, text in enumerate(step["chunks"]):
                if n and step.get("pause"):
                    await asyncio.sleep(float(step["pause"]))
                await client.session_update(
                    session_id,
                    kind(
                        session_update=update,  # type: ignore[arg-type]
                        content=TextContentBlock(type="text", text=text),
                        message_id=step.get("message_id"),
                    ),
                )
        elif "tool_call" in step:
            call = step["tool_call"]
            await client.session_update(
                session_id,
                start_tool_call(call["id"], call["title"], kind=call.get("kind"), status="pending"),
            )
        elif "tool_update" in step:
            call = step["tool_update"]
            await client.session_update(
                session_id, update_tool_call(call["id"], status=call.get("status", "completed"))
            )
        elif "plan" in step:
            await client.session_update(
                session_id, update_plan([plan_entry(e) for e in step["plan"]])
            )
        elif "permission" in step:
            ask = step["permission"]
            answer = await client.request_permission(
                session_id=session_id,
                tool_call=ToolCallUpdate(
                    tool_call_id=ask.get("id", "perm-1"),
                    title=ask.get("title", "tool"),
                    kind=ask.get("kind"),
                    field_meta=ask.get("meta"),
                ),
                options=[
                    PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                    PermissionOption(option_id="always", name="Always", kind="allow_always"),
                    PermissionOption(option_id="no", name="Reject", kind="reject_once"),
                ],
            )
            outcome = answer.outcome
            chosen = getattr(outcome, "option_id", None) or "cancelled"
            await self._say(session_id, f"permission: {chosen}")
        elif "read" in step:
            try:
                got = await client.read_text_file(session_id=session_id, path=step["read"])
                await self._say(session_id, f"read: {got.content}")
            except RequestError as exc:
                await self._say(session_id, f"error {exc.code}: {exc}")
        elif "write" in step:
            try:
                await client.write_text_file(
                    session_id=session_id, path=step["write"], content=step.get("content", "")
                )
                await self._say(session_id, "wrote")
            except RequestError as exc:
                await self._say(session_id, f"error {exc.code}: {exc}")
        elif "terminal" in step:
            try:
                await client.create_terminal(session_id=session_id, command="ls")
                await self._say(session_id, "terminal created")
            except RequestError as exc:
                await self._say(session_id, f"error {exc.code}: {exc}")
        elif "usage" in step:
            usage = step["usage"]
            cost = usage.get("cost")
            await client.session_update(
                session_id,
                UsageUpdate(
                    session_update="usage_update",
                    used=usage["used"],
                    size=usage["size"],
                    cost=Cost(amount=cost, currency="USD") if cost is not None else None,
                ),
            )
        elif "sleep" in step:
            await asyncio.sleep(step["sleep"])
        elif "wait_cancel" in step:
            await self.cancelled[session_id].wait()
            return "cancelled"
        elif "garbage" in step:
            _raw(step["garbage"].encode() + b"\n")
            await asyncio.Event().wait()
        elif "huge_line" in step:
            chunk = b"y" * (1024 * 1024)
            for _ in range(int(step["huge_line"])):
                _raw(chunk)
            await asyncio.Event().wait()
        elif "stderr" in step:
            sys.stderr.write(step["stderr"] + "\n")
            sys.stderr.flush()
        elif "close_stdout" in step:
            os.close(1)
            await asyncio.Event().wait()
        elif "cwd" in step:
            await self._say(session_id, f"cwd: {self.cwd.get(session_id)} (process: {os.getcwd()})")
        elif "env_value" in step:
            name = str(step["env_value"])
            await self._say(session_id, f"{name}={os.environ.get(name, '')}")
        elif "env" in step:
            await self._say(session_id, "env: " + json.dumps(sorted(os.environ)))
        elif "state" in step:
            options = {k: o.get("current") for k, o in sorted(self.options.items())}
            await self._say(session_id, f"state: mode={self.mode} options={json.dumps(options)}")
        elif "exit" in step:
            os._exit(int(step["exit"]))
        elif "error" in step:
            error = step["error"]
            raise RequestError(error["code"], error["message"], error.get("data"))
        elif "python" in step:
            scope: dict[str, Any] = {
                "prompt": getattr(self, "prompt_text", ""),
                "servers": [
                    {
                        "name": s.name,
                        "command": getattr(s, "command", None),
                        "args": list(getattr(s, "args", [])),
                        "env": {e.name: e.value for e in getattr(s, "env", [])},
                    }
                    for s in self.mcp_servers.get(session_id, [])
                ],
            }
            await asyncio.to_thread(exec, step["python"], scope)
            await self._say(session_id, f"python: {scope.get('result')}")
        elif "mcp" in step:
            call = step["mcp"]
            said = await self._mcp(
                session_id, call["tool"], call.get("args"), beat=bool(call.get("beat"))
            )
            await self._say(session_id, said)
        elif "elicit" in step:
            await self._say(session_id, await self._elicit(session_id, step["elicit"]))
        elif "stop" in step:
            return str(step["stop"])
        return None

    async def _elicit(self, session_id: str, ask: dict[str, Any]) -> str:
        """elicitation/create in form mode (or url mode), as an agent does when the client
        advertised the capability; says `elicit: ACTION CONTENT` (`elicit: no capability`
        when the client did not advertise form elicitation)."""
        assert self.client is not None
        caps = getattr(self, "client_capabilities", None)
        elicitation = getattr(caps, "elicitation", None)
        mode: Any
        if ask.get("url"):
            mode = ElicitationUrlSessionMode(
                session_id=session_id, elicitation_id="e1", url=str(ask["url"])
            )
        else:
            if elicitation is None or elicitation.form is None:
                return "elicit: no capability"
            mode = ElicitationFormSessionMode(
                session_id=session_id,
                requested_schema=ElicitationSchema.model_validate(ask.get("schema") or {}),
            )
        try:
            answer = await self.client.create_elicitation(
                message=str(ask.get("message", "?")), mode=mode
            )
        except RequestError as exc:
            return f"elicit error {exc.code}: {exc}"
        content = getattr(answer, "content", None)
        return f"elicit: {answer.action} {json.dumps(content, sort_keys=True)}"

    async def _beat(self, session_id: str) -> None:
        await _beat_forever(self, session_id)

    async def _mcp(
        self, session_id: str, tool: str, args: dict[str, Any] | None, *, beat: bool = False
    ) -> str:
        """Call `tool` on the session's `laneway` MCP server, started as an agent starts one.
        With `beat`, a thought `starting tools` every 0.2 s until the server is up (its start
        is the agent's work, not silence), none while the call runs."""
        beating = asyncio.create_task(self._beat(session_id)) if beat else None
        try:
            return await self._call_mcp(session_id, tool, args, beating)
        finally:
            if beating is not None:
                beating.cancel()

    async def _call_mcp(
        self,
        session_id: str,
        tool: str,
        args: dict[str, Any] | None,
        beating: asyncio.Task[None] | None,
    ) -> str:
        # imported off the loop: a slow import must not keep the beat from being said
        await asyncio.to_thread(importlib.import_module, "mcp.client.stdio")
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        server = next(
            (s for s in self.mcp_servers.get(session_id, []) if s.name == "laneway"), None
        )
        if server is None or not hasattr(server, "command"):
            return f"mcp {tool} error: no stdio MCP server named laneway in mcpServers"
        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env={e.name: e.value for e in server.env},
        )
        try:
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                if beating is not None:
                    beating.cancel()
                result = await session.call_tool(tool, args or {})
        except Exception as exc:  # noqa: BLE001 - reported to the test as the agent's message
            return f"mcp {tool} error: {type(exc).__name__}: {exc}"
        text = " ".join(getattr(c, "text", "") for c in result.content)
        return f"mcp {tool} error: {text}" if result.is_error else f"mcp {tool}: {text}"


async def _beat_forever(agent: FakeAgent, session_id: str) -> None:
    assert agent.client is not None
    while True:
        await agent.client.session_update(session_id, update_agent_thought_text("starting tools"))
        await asyncio.sleep(0.2)


def main() -> None:
    asyncio.run(run_agent(FakeAgent(_script()), use_unstable_protocol=True))


if __name__ == "__main__":
    main()
