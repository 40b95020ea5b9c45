"""What the model APIs' stand-ins (anthropic_, openai_, chat_ and gemini_standin) share: a
quiet HTTP/1.1 handler that answers JSON, and the wait of a held reply."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

JSON = "application/json"


class JsonHandler(BaseHTTPRequestHandler):
    """Keep-alive (the agents' HTTP clients reuse connections), no log lines on stderr."""

    protocol_version = "HTTP/1.1"
    content_type = JSON

    def log_message(self, *_args: Any) -> None:
        pass

    def more_headers(self) -> Mapping[str, str]:
        """Headers every answer carries (the Anthropic API's `request-id`)."""
        return {}

    def _json(self, status: int, body: Any, headers: Mapping[str, str] = {}) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(raw)))
        for name, value in {**self.more_headers(), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)


def held(reached: threading.Event, release: threading.Event, closing: threading.Event) -> bool:
    """Say the held request arrived and wait for the test to release it: False when the
    stand-in closes first (the request is then left unanswered)."""
    reached.set()
    while not release.wait(0.1):
        if closing.is_set():
            return False
    return True
