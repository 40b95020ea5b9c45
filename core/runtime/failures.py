"""What a terminal agent failure is, and the routes by which one happens."""

from __future__ import annotations

import attrs


@attrs.frozen
class AgentFailure:
    """One terminal failure of an agent session.

    :param user_initiated: set only by the user cancelling the retry loop (route R6); it is
        an explicit field, never inferred from the message or the route.
    """

    task_id: str
    session_id: str | None
    route: str
    error_message: str = ""
    agent_execution_id: str = ""
    agent_profile_id: str = ""
    run_id: str | None = None
    user_initiated: bool = False

    @property
    def operation_id(self) -> str:
        """The failure's identity: a session hosts several executions, each may fail once."""
        base = f"agent_error:session:{self.session_id}"
        return f"{base}:{self.agent_execution_id}" if self.agent_execution_id else base
