"""The agent runtime: the wing's rooms put together for a host (`host.runtime`), and the one
face the worker, the commands and the arrival's session step call.

Each job is in its room: the turn loop in `turns`, the protocols in `protocols/`, stops and
fencing in `stops`, the per-session guard in `guards`, a failure's handling in `failure`, the
tool server's grants in `tools/`. This class holds their state for one process and nothing
else."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from core.agents.failure import Failures
from core.agents.guards import SessionGuards
from core.agents.ports import AgentPort
from core.agents.protocols import TurnProtocol, exec_process
from core.agents.protocols.acp.turn import AcpProtocol
from core.agents.protocols.exec import ExecProtocol
from core.agents.stops import STOPS, InFlight
from core.agents.tools.access import ToolAccess
from core.agents.turns import DEFAULT_RETRY_DELAYS, TurnLoop, retry_delays_from_env
from core.agents.values import TurnOutcome
from core.model import AgentFailure, FailureCase

if TYPE_CHECKING:
    from core.agents.protocols.acp.conversation import Conversations
    from core.agents.tools.broker import ToolBroker

__all__ = [
    "DEFAULT_RETRY_DELAYS",
    "STOPS",
    "AgentRuntime",
    "TurnOutcome",
    "retry_delays_from_env",
]


class AgentRuntime:
    def __init__(self, peers: AgentPort, retry_delays: tuple[float, ...] | None = None) -> None:
        self.peers = peers
        self.guards = SessionGuards()
        self.in_flight = InFlight(peers)
        self.tools = ToolAccess(peers)
        self.failures = Failures(peers, self.guards, self.in_flight)
        self.acp = AcpProtocol(self.in_flight, self.tools)
        # a run's tool calls are answered only from its own agent's process tree
        self.tools.owner = lambda grant: self.acp.running_agent(grant.session_id)
        protocols: dict[str, TurnProtocol] = {
            "exec": ExecProtocol(self.in_flight),
            "acp": self.acp,
        }
        self.turns = TurnLoop(
            self.in_flight,
            self.failures,
            protocols,
            retry_delays if retry_delays is not None else retry_delays_from_env(),
        )
        self.run_turn = self.turns.run_turn
        """Run one agent turn for a session (blocking), then any queued messages."""

    @property
    def retry_delays(self) -> tuple[float, ...]:
        """The waits before each retry of a transient failure (the turn loop's)."""
        return self.turns.retry_delays

    @retry_delays.setter
    def retry_delays(self, delays: tuple[float, ...]) -> None:
        self.turns.retry_delays = delays

    # -- turns (core.agents.turns) ---------------------------------------------------------------

    @property
    def conversations(self) -> Conversations:
        """The ACP agents this process keeps between turns (the ACP SDK loads on first use)."""
        return self.acp.conversations

    @property
    def broker(self) -> ToolBroker:
        """This process's tool broker: what the `laneway` tool servers of its agents call."""
        return self.tools.broker

    # -- the per-session guard --------------------------------------------------------------------

    def guard(self, session_id: str) -> AbstractContextManager[None]:
        return self.guards.guard(session_id)

    def guard_held(self, session_id: str) -> bool:
        return self.guards.guard_held(session_id)

    # -- stops and fencing (core.agents.stops) ----------------------------------------------------

    def kill_all(self) -> None:
        self.in_flight.kill_all()

    def stop_run(self, run_id: str, why: str = "cancel") -> bool:
        return self.in_flight.stop_run(run_id, why)

    def stop_fenced(self, epoch: str) -> list[str]:
        return self.in_flight.stop_fenced(epoch)

    def fenced_groups(self) -> list[int]:
        return self.in_flight.fenced_groups()

    def refused(self, run_id: str | None, reason: str, what: str) -> None:
        self.in_flight.refused(run_id, reason, what)

    def fenced(self, run_id: str | None) -> str | None:
        return self.in_flight.fenced(run_id)

    def turn_in_flight(self, session_id: str) -> bool:
        return self.in_flight.turn_in_flight(session_id)

    def cancel_retry(self, session_id: str) -> bool:
        return self.in_flight.cancel_retry(session_id)

    def end_finished_conversations(self) -> dict[str, str]:
        """The ACP conversations kept here whose tasks are archived, deleted or at their
        terminal step end (`session/close` where offered); which, and why."""
        return self.acp.end_finished()

    def close(self) -> None:
        """The worker is done: the conversations it kept end (their agents' process groups),
        and what its last exec turns left outside their groups is swept now, not after a
        batch's wait."""
        self.acp.close()
        self.tools.close()
        exec_process.sweep_deferred()

    # -- terminal failure (core.agents.failure) ---------------------------------------------------

    def fail_and_dispatch(self, failure: AgentFailure) -> TurnOutcome:
        return self.failures.fail_and_dispatch(failure)

    def handle_failure(self, failure: AgentFailure) -> Callable[[], bool]:
        return self.failures.handle_failure(failure)

    def settle(self, failure: AgentFailure) -> Callable[[], FailureCase]:
        return self.failures.settle(failure)
