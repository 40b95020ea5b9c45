"""laneway: a workflow orchestrator for task boards whose cards are worked by AI agents.

The public API for hosts is `Host` (open a database, get services) and `Features`.
"""

from core import logs
from core.errors import LanewayError
from core.host import Host
from core.kinds import Features

logs.disable()

__all__ = ["Features", "Host", "LanewayError"]
