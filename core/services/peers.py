"""What every service is handed when it is built: the host's shared parts (the store, the
bundle, the engine, the epoch, ...), seen as a protocol, never `core.host.Host`. No service is
reached through it: a service names the services it calls in its own constructor
(`core.services.base.Lazy`), and the host builds each with those (`core.host`).

The composition root (`core.host`) hands itself over, and satisfies this structurally; the
modules below it then never import it, so no import circle runs through the host. Each part is
still built when first named (`core.host._Built`), so a command imports only what it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from core.arrival import Arrivals
    from core.bundle import Bundle
    from core.engine import Engine
    from core.kernel import Kernel
    from core.model import Task
    from core.operations import Operations
    from core.store.database import Store
    from core.store.repository import Repository


class Peers(Protocol):
    """The host's parts every service may call (each built when first read)."""

    @property
    def store(self) -> Store: ...

    @property
    def repository(self) -> Repository: ...

    @property
    def kernel(self) -> Kernel: ...

    @property
    def writable(self) -> bool: ...

    @property
    def bundle(self) -> Bundle: ...

    def current_bundle(self) -> Bundle | None: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def arrivals(self) -> Arrivals: ...

    def live_epoch(self) -> str: ...

    def watch_epoch(self, on_lost: Callable[[str], object]) -> Callable[[], None]: ...

    def follow_board(self) -> None: ...

    @property
    def operations(self) -> Operations: ...

    def cleanup_room(
        self, task: Task, path: Path, argv: tuple[str, ...], env: dict[str, str]
    ) -> tuple[tuple[str, ...], dict[str, str]]:
        """A workflow's cleanup command line and environment, put in the room of the task's
        sandboxed agent when it had one (`core.services.worktrees.CleanupRoom`)."""
        ...
