"""The ACP protocol behind the turn protocol: a try at a turn is one prompt to the session's
conversation, which this process keeps between turns (the SDK loads with the first)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from core.agents.stops import InFlight, LiveTurn
from core.agents.tools.access import ToolAccess
from core.agents.tools.wire import SOCKET_ENV
from core.agents.values import TurnEnd

if TYPE_CHECKING:
    from core.agents.protocols import TurnCall
    from core.agents.protocols.acp.conversation import Conversations


class AcpProtocol:
    def __init__(self, in_flight: InFlight, tools: ToolAccess) -> None:
        self.in_flight = in_flight
        self.tools = tools
        self._conversations: Conversations | None = None

    @property
    def conversations(self) -> Conversations:
        """The ACP agents this process keeps between turns (the ACP SDK loads on first use)."""
        if self._conversations is None:
            from core.agents.protocols.acp.conversation import Conversations
            from core.agents.protocols.acp.facade import shared_loop

            self._conversations = Conversations(shared_loop)
            self.in_flight.adopt(self._conversations)
        return self._conversations

    def running_first(self, session_id: str) -> bool:
        """An agent still to start shows RUNNING while it starts; a live conversation's turn
        sets it with its prompt (one transaction, not two: issue 45)."""
        return self._conversations is None or not self._conversations.kept(session_id)

    def running_agent(self, session_id: str | None) -> int | None:
        """The pid of the ACP agent running `session_id`'s turn now, if any."""
        if session_id is None or self._conversations is None:
            return None
        return self._conversations.running_group(session_id)

    def close(self) -> None:
        if self._conversations is not None:
            self._conversations.close_all()

    def end_finished(self) -> dict[str, str]:
        """End the kept conversations whose sessions the board has finished with (archived,
        deleted, at the terminal step): `session/close` where the agent offers it. What was
        ended, and why."""
        if self._conversations is None:
            return {}
        idle = self._conversations.idle()
        if not idle:
            return {}  # nothing kept: no read at all
        finished = self.in_flight.peers.sessions.ended(idle)
        return {s: why for s, why in finished.items() if self._conversations.end(s, why)}

    def attempt(self, turn: LiveTurn, call: TurnCall) -> TurnEnd:
        # the ACP SDK (its schema builds ~600 ms of pydantic models) is imported by the first
        # ACP turn, not by every worker, `serve` or command that never starts an ACP agent
        from acp.schema import McpServerStdio

        from core.agents.protocols.acp.conversation import AcpTurn, run_acp_turn

        servers, token = self.tools.servers(
            call.session_id,
            task_id=turn.task_id,
            step_id=turn.step_id,
            run_id=turn.run_id,
            agent_profile_id=turn.agent_profile_id,
        )
        room = call.room
        if room is not None:
            # the tool server the agent starts reaches the worker's broker by its socket
            room = room.exposing(
                Path(env.value).parent
                for server in servers
                if isinstance(server, McpServerStdio)
                for env in server.env
                if env.name == SOCKET_ENV
            )
        try:
            with self.in_flight.peers.store.agent_turn():
                return run_acp_turn(
                    self.conversations,
                    AcpTurn(
                        call.session_id,
                        call.profile,
                        call.env,
                        call.prompt,
                        call.cwd,
                        call.want,
                        call.session.agent,
                        servers,
                        room,
                        asking=lambda: self.tools.asking(token),
                        running=call.running,
                    ),
                    call.record,
                )
        finally:
            # between turns the agent's tools act for no run at all
            self.tools.revoke(token)
