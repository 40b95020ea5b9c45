"""laneway: a workflow orchestrator for task boards whose cards are worked by AI agents.

The public API for hosts is `Host` (open a database, get services) and `Features`.
"""

from core import logs
from core.errors import LanewayError
from core.kinds import Features
from core.host import Host  # noqa: E402  (kinds and model first: plugins import them)

logs.disable()

__all__ = ["Features", "Host", "LanewayError"]
