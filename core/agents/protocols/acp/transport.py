"""The agent's stdin/stdout as JSON-RPC messages, with bounds the SDK's stdio path lacks.

The SDK's newline transport joins the pieces of a line past its reader's limit, so a 100 MB
line is held whole, and it logs and skips a line that is not JSON. Here a line longer than
`max_line` bytes, or one that is not a JSON object, ends the connection with `failure` saying
which: the agent broke the protocol, and waiting for what it meant would be unbounded. The
reader's buffer never holds more than about twice `max_line` (asyncio pauses the pipe there).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from typing import Any, Final

STDERR_KEEP: Final = 4000
_PREVIEW: Final = 120


class LineTransport:
    """An `acp` message transport over an agent process's stdout (reader) and stdin (writer)."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, max_line: int
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max_line = max_line
        self._lock = asyncio.Lock()
        self.failure: str | None = None
        self.bad_usage: str | None = None
        """The last answer's usage that was not numbers laneway can count (left out of it)."""
        self.last_heard = time.monotonic()
        # The unstable `models` field of session/new, session/load and session/resume answers:
        # the schema drops it, yet it is how some adapters offer their model choice.
        self._watch: set[Any] = set()
        self.models: dict[str, Any] | None = None

    async def send(self, message: dict[str, Any]) -> None:
        if message.get("method") in ("session/new", "session/load", "session/resume"):
            self._watch.add(message.get("id"))
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        async with self._lock:
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
                raise ConnectionError(f"the agent's stdin is closed: {exc}") from None

    async def receive(self) -> dict[str, Any] | None:
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                line = exc.partial
                if not line.strip():
                    return None
            except asyncio.LimitOverrunError:
                self.failure = f"the agent wrote a line longer than {self._max_line} bytes"
                return None
            self.last_heard = time.monotonic()
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):  # nested past the parser's depth: not JSON-RPC
                message = None
            if not isinstance(message, dict):
                preview = line[:_PREVIEW].decode(errors="replace").strip()
                self.failure = f"the agent wrote a line that is not JSON-RPC: {preview!r}"
                return None
            result = message.get("result")
            if (
                "method" not in message
                and isinstance(result, dict)
                and not _usage_sane(result.get("usage"))
            ):
                # a turn's usage that is not finite counts (Infinity, NaN, 1e999, -1) would fail
                # the whole answer's validation: the usage is left out and said once, and the
                # turn ends as the agent ended it (issue 39 item 4)
                self.bad_usage = json.dumps(result.pop("usage"), default=str)[:_PREVIEW]
            if "id" in message and message.get("id") in self._watch and "method" not in message:
                self._watch.discard(message["id"])
                result = message.get("result")
                models = result.get("models") if isinstance(result, dict) else None
                self.models = models if isinstance(models, dict) else None
            return message

    async def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self._writer.close()


def _usage_sane(usage: Any) -> bool:
    """Whether an answer's `usage` is absent or a mapping of finite, non-negative numbers."""
    if usage is None:
        return True
    if not isinstance(usage, dict):
        return False
    return all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        for k, v in usage.items()
        if k != "_meta" and v is not None
    )


async def keep_stderr_tail(stream: asyncio.StreamReader, tail: bytearray) -> None:
    """Read the agent's stderr to its end, keeping only its last STDERR_KEEP bytes."""
    while chunk := await stream.read(65536):
        tail.extend(chunk)
        if len(tail) > STDERR_KEEP:
            del tail[: len(tail) - STDERR_KEEP]


def stderr_text(tail: bytes | bytearray) -> str:
    """The kept tail of the agent's stderr as text, its first line whole when it was cut."""
    text = bytes(tail).decode(errors="replace")
    if len(tail) >= STDERR_KEEP and "\n" in text:
        text = text.split("\n", 1)[1]  # the oldest kept line lost its beginning
    return text.strip()


LAST_LINES: Final = 10
LAST_CHARS: Final = 1500


def last_lines(text: str) -> str:
    """The last non-empty lines of `text` (at most LAST_LINES, about LAST_CHARS characters), on
    one line joined by " | ": the reason an agent gives for dying is rarely its last line alone
    (npm ends with "A complete log of this run can be found in ...", after the reason)."""
    kept: list[str] = []
    size = 0
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line:
            continue
        if kept and (len(kept) == LAST_LINES or size + len(line) > LAST_CHARS):
            break
        kept.append(line[-LAST_CHARS:])
        size += len(line) + 3
    return " | ".join(reversed(kept))
