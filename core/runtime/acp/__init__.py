"""laneway as an Agent Client Protocol client (AGENTS.md): a blocking facade over the SDK.

`shared_loop().start_agent(...)` starts an agent process and initialises it; the returned
`AgentConnection` opens or loads a session, reconciles its mode, options and model, and runs
turns whose end is routed as AGENTS.md "How a turn ends (ACP)".
"""

from core.runtime.acp.facade import AcpLoop, AgentConnection, McpServer, shared_loop
from core.runtime.acp.values import (
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
