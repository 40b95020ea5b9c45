"""laneway's contract-test kit: a pytest plugin for laneway and its plugin authors.

Registered through the ``pytest11`` entry point ``laneway = "plugins.testing"``, so every pytest
run in an environment where laneway is installed loads it. It is import-light (this module
imports nothing but pytest; the kit's modules load when a fixture is first used) and inert
(no hooks, no autouse fixtures): nothing happens until a test asks for a fixture.

Fixtures
--------

``laneway_logs``
    a list of loguru records (dicts: ``level``, ``message``, ``extra``, ``name``, ``thread``)
    emitted while the test runs, DEBUG and up, with laneway's packages enabled. Assert on
    ``record["extra"]`` fields, never on text.
``laneway_db_url``
    the database the kit's hosts open: a fresh SQLite file in the test's ``tmp_path``.
    Override it (in a ``conftest.py``) to run the same tests on PostgreSQL.
``laneway_plugins``
    the plugins ``laneway_host`` loads: entry-point names (``"kanban"``) or ``(name, plugin)``
    pairs. Empty by default (core's own kinds only). Override it per module or class.
``laneway_host_factory``
    a :class:`plugins.testing.hosts.HostFactory`: ``open(plugins, features=...)`` opens a
    host that loads exactly the plugins named (installed plugins never leak in) and follows
    the board's features (``features`` given are written to the test's board),
    ``restart(host)`` closes and reopens it (new epoch, recovery scan). Hosts still open at
    the end of the test are closed.
``laneway_host``
    ``laneway_host_factory.open(laneway_plugins)``.
``laneway_arrivals``
    a :class:`plugins.testing.arrivals.Arrivals`: ``board(host, on_enter)`` imports a
    ``Src -> Target -> Out`` workflow declaring `on_enter` at Target, and
    ``enter(host, board, path)`` makes a fresh task arrive at Target through entry path
    E1 (turn complete), E2 (manual move), E3 (WIP promotion), E4 (switch_workflow) or
    E5 (task update).
``laneway_fault``
    :func:`plugins.testing.faults.run_with_fault`: run a snippet in a child process with
    ``LANEWAY_FAULT`` set; returns its exit status (``.crashed`` when the fault point fired).

The contract suite
------------------

:class:`plugins.testing.contract.ActionKindContract` (also importable from here) is an
abstract test class: subclass it, name your plugin and kind, and pytest runs every check of
the action-kind contract against it. See docs/plugin-authoring.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from core.host import Host
    from plugins.testing.arrivals import Arrivals
    from plugins.testing.faults import FaultRun
    from plugins.testing.hosts import HostFactory, PluginSpec

__all__ = [
    "CONTRACTS",
    "ENTRY_PATHS",
    "ActionKindContract",
    "Arrivals",
    "Board",
    "ContractBroken",
    "FaultRun",
    "HostFactory",
    "captured",
    "open_host",
    "run_with_fault",
    "selection_for",
]

_LAZY = {
    "ActionKindContract": "plugins.testing.contract",
    "CONTRACTS": "plugins.testing.contract",
    "ContractBroken": "plugins.testing.contract",
    "ENTRY_PATHS": "plugins.testing.arrivals",
    "Arrivals": "plugins.testing.arrivals",
    "Board": "plugins.testing.arrivals",
    "FaultRun": "plugins.testing.faults",
    "run_with_fault": "plugins.testing.faults",
    "HostFactory": "plugins.testing.hosts",
    "open_host": "plugins.testing.hosts",
    "selection_for": "plugins.testing.hosts",
    "captured": "plugins.testing.logs",
}


def __getattr__(name: str) -> Any:
    """The kit's names, imported on first use (loading the pytest plugin stays cheap)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


@pytest.fixture
def laneway_logs() -> Iterator[list[dict[str, Any]]]:
    from plugins.testing.logs import captured

    with captured() as records:
        yield records


@pytest.fixture
def laneway_db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'laneway.db'}"


@pytest.fixture
def laneway_plugins() -> Sequence[PluginSpec]:
    return ()


@pytest.fixture
def laneway_host_factory(laneway_db_url: str, tmp_path: Path) -> Iterator[HostFactory]:
    from plugins.testing.hosts import HostFactory

    factory = HostFactory(laneway_db_url, tmp_path / "laneway-files")
    try:
        yield factory
    finally:
        factory.close_all()


@pytest.fixture
def laneway_host(laneway_host_factory: HostFactory, laneway_plugins: Sequence[PluginSpec]) -> Host:
    return laneway_host_factory.open(laneway_plugins)


@pytest.fixture
def laneway_arrivals(tmp_path: Path) -> Arrivals:
    from plugins.testing.arrivals import Arrivals

    return Arrivals(tmp_path / "laneway-files")


@pytest.fixture
def laneway_fault() -> Callable[..., FaultRun]:
    from plugins.testing.faults import run_with_fault

    return run_with_fault
