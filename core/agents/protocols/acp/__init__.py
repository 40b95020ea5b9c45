"""laneway as an Agent Client Protocol client (AGENTS.md): a blocking facade over the SDK.

`shared_loop().start_agent(...)` starts an agent process and initialises it; the returned
`AgentConnection` (loaded on first use) opens or loads a session, reconciles its mode,
options and model, and runs turns whose end is routed as AGENTS.md "How a turn ends (ACP)".
"""

from typing import TYPE_CHECKING, Any

from core.agents.values import (
    AcpError,
    AgentInfo,
    Change,
    ConfigOption,
    Mode,
    PermissionOption,
    PermissionPolicy,
    PermissionRequest,
    SessionState,
    TokenUsage,
    TranscriptItem,
    TurnEnd,
)

if TYPE_CHECKING:
    from core.agents.protocols.acp.facade import AcpLoop, AgentConnection, McpServer, shared_loop

_FACADE = frozenset({"AcpLoop", "AgentConnection", "McpServer", "shared_loop"})


def __getattr__(name: str) -> Any:
    # The SDK (pydantic, asyncio) loads only when something drives an agent: an exec agent's
    # turn uses the values and bounds alone.
    if name in _FACADE:
        from core.agents.protocols.acp import facade

        return getattr(facade, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AcpError",
    "AcpLoop",
    "AgentConnection",
    "AgentInfo",
    "Change",
    "ConfigOption",
    "McpServer",
    "Mode",
    "PermissionOption",
    "PermissionPolicy",
    "PermissionRequest",
    "SessionState",
    "TokenUsage",
    "TranscriptItem",
    "TurnEnd",
    "shared_loop",
]
