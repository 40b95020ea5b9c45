"""Which machine a process is on: `LANEWAY_HOST` when set (tests use it to be two machines on
one), else the machine's host name. A task's worktree records the host that made it, and only
workers on that host claim the task's runs (core.runs)."""

from __future__ import annotations

import os
import socket


def name() -> str:
    return os.environ.get("LANEWAY_HOST") or socket.gethostname()
