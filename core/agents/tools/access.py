"""The worker's half of the tool server as a turn sees it: the `laneway` MCP server granted
to a turn's run, and the grant revoked when the turn ends. The broker (and its socket) starts
with the first ACP turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from acp.schema import McpServerStdio

    from core.agents.ports import AgentPort
    from core.agents.tools.broker import Owner, ToolBroker


class ToolAccess:
    def __init__(self, peers: AgentPort) -> None:
        self.peers = peers
        self.owner: Owner | None = None
        """Which process runs a grant's turn: the broker answers a call only from it or its
        descendants (set by the runtime to its ACP conversations' running agents)."""
        self._broker: ToolBroker | None = None
        self._tokens: dict[str, str] = {}
        """The tool-server token each live conversation was opened with, by session."""

    @property
    def broker(self) -> ToolBroker:
        """This process's tool broker: what the `laneway` tool servers of its agents call."""
        if self._broker is None:
            from core.agents.tools.broker import ToolBroker

            self._broker = ToolBroker(self.peers, owner=self.owner)
        return self._broker

    def servers(
        self,
        session_id: str,
        *,
        task_id: str,
        step_id: str | None,
        run_id: str | None,
        agent_profile_id: str | None,
    ) -> tuple[Sequence[McpServerStdio], str]:
        """The MCP servers an ACP session is opened (or loaded) with, the `laneway` tool server
        granted to this turn's run, and the grant's token (revoked when the turn ends)."""
        from core.agents.tools.broker import mcp_server

        grant = self.broker.grant(
            task_id=task_id,
            step_id=step_id,
            run_id=run_id,
            session_id=session_id,
            agent_profile_id=agent_profile_id,
            token=self._tokens.get(session_id),
        )
        self._tokens[session_id] = grant.token
        return (mcp_server(grant),), grant.token

    def asking(self, token: str) -> bool:
        """Whether the run holding `token` waits for a person (an `ask` in flight)."""
        return self._broker is not None and self._broker.asking(token)

    def revoke(self, token: str) -> None:
        self.broker.revoke(token)

    def close(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None
            self._tokens.clear()
