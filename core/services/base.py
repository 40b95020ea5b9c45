"""What every service shares: the host it serves and a guard against writing read-only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.errors import LanewayError

if TYPE_CHECKING:
    from core.host import Host


class Service:
    def __init__(self, host: Host) -> None:
        self.host = host

    def _require_writer(self) -> None:
        if not self.host.writable:
            raise LanewayError("this host was opened read-only")
