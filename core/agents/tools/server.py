"""The agent's half of the tool server: the stdio MCP server `laneway` (AGENTS.md "The tool
server"), started by the agent from ACP's `mcpServers` as `python -m core.agents.tools`.

It holds no database credentials and imports nothing that could open a database: its
environment gives it the worker's broker socket, the broker's authkey and its run's token
(`core.agents.tools.wire`), and each tool call is forwarded to the broker, which checks it
against the run's grant and answers it with the board's services.
"""

from __future__ import annotations

import json
import os
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from core.agents.tools import wire

Verdict = Literal["approved", "rejected", "changes_requested"]


class Channel:
    """The way to the worker's broker, as the environment names it."""

    def __init__(self, address: str, authkey: bytes, token: str) -> None:
        self.address = address
        self.authkey = authkey
        self.token = token

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Channel:
        env = dict(os.environ) if env is None else env
        missing = [n for n in (wire.SOCKET_ENV, wire.KEY_ENV, wire.TOKEN_ENV) if not env.get(n)]
        if missing:
            raise SystemExit(
                f"laneway tool server: {', '.join(missing)} not set "
                "(the worker hands these to the agent in session/new's mcpServers)"
            )
        try:
            key = bytes.fromhex(env[wire.KEY_ENV])
        except ValueError:
            raise SystemExit(f"laneway tool server: {wire.KEY_ENV} is not hex") from None
        return cls(env[wire.SOCKET_ENV], key, env[wire.TOKEN_ENV])

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        """The broker's answer to one call; ToolError carrying its one line when refused."""
        try:
            with Client(self.address, family="AF_UNIX", authkey=self.authkey) as conn:
                wire.send(conn, {"token": self.token, "tool": tool, "args": args})
                reply = wire.receive(conn)
        except AuthenticationError as exc:
            raise ToolError(f"the laneway worker refused the connection: {exc}") from None
        except (OSError, EOFError, ValueError) as exc:
            raise ToolError(f"the laneway worker cannot be reached: {exc}") from None
        if "error" in reply:
            raise ToolError(str(reply["error"]))
        return reply.get("ok")


def _args(**given: Any) -> dict[str, Any]:
    return {k: v for k, v in given.items() if v is not None}


def build(channel: Channel) -> MCPServer[Any]:
    """The `laneway` MCP server whose five tools forward to `channel`."""
    server: MCPServer[Any] = MCPServer(
        wire.SERVER_NAME,
        # the agent's stderr is laneway's failure evidence: a refused call is not news there
        log_level="WARNING",
        instructions=(
            "Tools acting on the laneway board for the task you are working on: read the "
            "task, record your verdict, signal that the step is complete, comment, ask a "
            "person a question."
        ),
    )

    def answer(tool: str, args: dict[str, Any]) -> str:
        return json.dumps(channel.call(tool, args), ensure_ascii=False)

    @server.tool(
        description=(
            "The task you work on: its title, description, step and state, the step's "
            "prompt, the verdicts and comments given at the step, and the task's comments."
        )
    )
    def get_task(task_id: str | None = None) -> str:
        return answer("get_task", _args(task_id=task_id))

    @server.tool(
        description=(
            "Record your verdict on the task at this step (approved, rejected or "
            "changes_requested), with an optional comment."
        )
    )
    def decide(verdict: Verdict, comment: str | None = None, task_id: str | None = None) -> str:
        return answer("decide", _args(verdict=verdict, comment=comment, task_id=task_id))

    @server.tool(description="Signal that the work of this step is complete.")
    def complete_step(task_id: str | None = None) -> str:
        return answer("complete_step", _args(task_id=task_id))

    @server.tool(description="Add a comment to the task, by you.")
    def comment(text: str, task_id: str | None = None) -> str:
        return answer("comment", _args(text=text, task_id=task_id))

    @server.tool(
        description=(
            "Ask a person a question and wait for the answer (it may take a while: a person "
            "answers from the laneway board). With `choices`, the answer is one of them. "
            "Returns {state: answered|declined, answer}."
        )
    )
    def ask(question: str, choices: list[str] | None = None, task_id: str | None = None) -> str:
        return answer("ask", _args(question=question, choices=choices, task_id=task_id))

    return server


def main() -> None:
    build(Channel.from_env()).run("stdio")
