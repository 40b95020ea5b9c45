"""How an agent is spoken to: one small turn protocol, and the protocols behind it side by
side, as a dialect sits behind SQLAlchemy's `Dialect`: `exec` (a subprocess per turn,
`exec.py` over `exec_process.py`) and `acp` (a conversation kept between turns, `acp/`).

The turn loop (core.agents.turns) resolves what every protocol needs (the workspace, the
desired state, the session as read) and hands one try at the turn to the profile's protocol,
which answers how it ended (`TurnEnd`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from core.agents.desired import Desired
    from core.agents.record import BoardRecord
    from core.agents.sandbox import Room
    from core.agents.stops import LiveTurn
    from core.agents.values import TurnEnd
    from core.model import AgentProfile, Session


@attrs.frozen
class TurnCall:
    """One try at a turn, resolved for its protocol."""

    session_id: str
    session: Session
    """The session as the try read it (its `agent` report, its metadata)."""
    profile: AgentProfile
    env: Mapping[str, str]
    prompt: str
    cwd: Path
    want: Desired
    record: BoardRecord
    execution_id: str
    room: Room | None = None
    """The sandbox the agent runs in (`profile --sandbox`), None: the worker's user's rights."""
    running: bool = False
    """The session is RUNNING already (`TurnProtocol.running_first` said so for this try)."""


class TurnProtocol(Protocol):
    """One protocol's way to run a try at a turn."""

    def running_first(self, session_id: str) -> bool:
        """Whether the session is set RUNNING before the try's workspace is looked up (an ACP
        agent still to start); otherwise the protocol sets it itself, with its prompt (exec, a
        live ACP conversation: one transaction for both)."""
        ...

    def attempt(self, turn: LiveTurn, call: TurnCall) -> TurnEnd:
        """Run the try; how it ended, routed (never raises for what the agent did)."""
        ...
