"""An Office Default board with one task at Review for the tool server's tests, and a way to
call the real `laneway` MCP server (a subprocess) with the MCP client SDK, as an agent does."""

from __future__ import annotations

from typing import Any

import anyio
import attrs
from acp.schema import McpServerStdio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from core.agents.tools.broker import Grant, ToolBroker
from core.host import Host
from core.model import Run, Session, Task, Workflow


@attrs.frozen
class Board:
    workflow: Workflow
    task: Task
    session: Session
    run: Run
    """The reviewer r1's run, queued when the task entered Review."""

    def step(self, name: str) -> str:
        found = self.workflow.step(name)
        assert found is not None, name
        return found.id


@attrs.frozen
class Answer:
    is_error: bool
    text: str


def review_board(host: Host, *, reviewers: int = 1) -> Board:
    """Office Default; `reviewers` reviewer seats (r1, r2, ...) at Review, each of which must
    approve (its quorum); `worker` the runner at Work; one task, moved to Review."""
    wf = host.workflows.create_from_template("office-default")
    host.profiles.add("worker", command=["true"])
    host.participants.add(step="Work", role="runner", profile="worker", workflow=wf.id)
    for n in range(1, reviewers + 1):
        host.profiles.add(f"r{n}", command=["true"])
        host.participants.add(step="Review", role="reviewer", profile=f"r{n}", workflow=wf.id)
    task = host.tasks.create(workflow=wf.id, title="Fix the login", description="It fails.")
    session = host.sessions.start(task.id, profile="worker")
    host.tasks.move(task.id, "Review")
    r1 = host.profiles.get("r1").id
    run = next(r for r in host.runs.list(task=task.id) if r.agent_profile_id == r1)
    return Board(wf, host.tasks.get(task.id), session, run)


def reviewer_grant(
    broker: ToolBroker, host: Host, board: Board, profile: str = "r1", run: Run | None = None
) -> Grant:
    return broker.grant(
        task_id=board.task.id,
        step_id=board.step("Review"),
        run_id=(run or board.run).id,
        session_id=board.session.id,
        agent_profile_id=host.profiles.get(profile).id,
    )


def call(server: McpServerStdio, *calls: tuple[str, dict[str, Any]]) -> list[Answer]:
    """Start the MCP server as an agent would (its command, args and env from ACP's
    mcpServers entry) and make each tool call in order."""

    async def run() -> list[Answer]:
        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env={e.name: e.value for e in server.env},
        )
        answers: list[Answer] = []
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for tool, args in calls:
                result = await session.call_tool(tool, args)
                text = " ".join(getattr(c, "text", "") for c in result.content)
                answers.append(Answer(bool(result.is_error), text))
        return answers

    return anyio.run(run)
