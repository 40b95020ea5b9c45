"""The kernel: what the layers below the services need from a host, and nothing more.

The transition, the entry dispatcher, the ledger, recovery, the arrival layer and the engine
take a `Kernel`, never the host: a store to run transactions and reads on, the epoch (read
through callables, because a fenced host moves to a new one), the bundle in force, and reads of
a task, a workflow, a step, a session and a task's live session (`core.store.repository`).
`services` is what a plugin's context carries as `ctx.services`: the kernel hands it over and
never calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import attrs

from core.plugin.registry import Registry
from core.store.database import Store
from core.store.repository import Repository

if TYPE_CHECKING:
    from core.plugin.views import PluginServices


class Published(Protocol):
    """What the kernel sees of the bundle in force (`core.bundle.Bundle`): its registry and
    store. The engine the bundle also carries sits above the kernel and is not seen here."""

    @property
    def registry(self) -> Registry: ...

    @property
    def store(self) -> Store: ...

    @property
    def generation(self) -> int: ...


@attrs.frozen
class Kernel:
    store: Store
    epoch: Callable[[], str | None]
    """The epoch as last checked (None for a read-only host)."""
    live_epoch: Callable[[], str]
    """The epoch to claim under: checks the liveness lock, fencing onto a new epoch if lost."""
    bundle: Callable[[], Published]
    """The bundle in force now: read it once per operation and keep using that one."""
    read: Repository
    services: PluginServices
    """Handed to plugin contexts unopened (`ActionContext.services`, `GuardContext.services`)."""


class HasKernel(Protocol):
    """Anything that holds a kernel (a host does): the entry points below the services
    accept it as well as a bare kernel."""

    @property
    def kernel(self) -> Kernel: ...


def kernel_of(source: Kernel | HasKernel) -> Kernel:
    return source if isinstance(source, Kernel) else source.kernel
