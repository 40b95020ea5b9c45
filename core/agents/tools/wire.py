"""What the two halves of the tool server share: the environment that hands the agent's MCP
server its channel, and the one-message-each-way exchange over it.

Messages are JSON in `send_bytes` frames, never pickles: the agent side is run by the agent,
which may send anything once it holds the key, and unpickling what it sends would run its
code in the worker that holds the board. Imports only the standard library.
"""

from __future__ import annotations

import json
from multiprocessing.connection import Connection
from typing import Any, Final

SOCKET_ENV: Final = "LANEWAY_TOOL_SOCKET"
"""The broker's unix socket (in a 0700 directory of the worker's)."""
KEY_ENV: Final = "LANEWAY_TOOL_KEY"
"""The broker's authkey, hex: the channel's challenge-response authentication."""
TOKEN_ENV: Final = "LANEWAY_TOOL_TOKEN"
"""The run's capability: which task, step and seat its calls act for."""

SERVER_NAME: Final = "laneway"
TOOLS: Final = ("get_task", "decide", "complete_step", "comment", "ask")

MAX_MESSAGE: Final = 4 * 1024 * 1024
"""The largest request or reply, in bytes: a larger one is refused, not read."""


def send(conn: Connection, message: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps(message, ensure_ascii=False).encode("utf-8"))


def receive(conn: Connection) -> dict[str, Any]:
    """One message; ValueError when it is not a JSON object (or is too large)."""
    raw = conn.recv_bytes(MAX_MESSAGE)
    try:
        message = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a JSON message: {exc}") from None
    except RecursionError:
        raise ValueError("not a JSON message: nested too deeply") from None
    if not isinstance(message, dict):
        raise ValueError("not a JSON object")  # noqa: TRY004 - bad input, as the line above
    return message
