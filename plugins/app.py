"""What a plugin's own *commands* use to open and drive a board (Office's `laneway demo`).

`plugins.api` is what executors, guards and observers use: values and views, handed a host
they never open. A command a plugin adds (``laneway_cli_commands``) opens the board itself,
and takes what it needs for that from here, never from `core`'s modules:

- :class:`Host`, the command line's :class:`Settings` and :func:`writer` (``with
  writer(settings) as host:``, so ``--db``, ``--json`` and the other global options hold for
  the plugin's command too);
- :func:`emit` and :func:`plain` for output;
- the board's :class:`Event` value, :func:`parse_time` for the board's timestamps;
- the :mod:`worker` loop and the :mod:`scripted` test agents.

Importing this module imports the host, so a plugin imports it where its command runs, not
where the command is declared (``laneway --help`` lists commands without loading a host).
Names not listed in ``__all__`` are not part of the contract.
"""

from __future__ import annotations

from core.agents import scripted, worker
from core.cli.app import Settings, writer
from core.cli.output import emit, plain
from core.host import Host
from core.ids import parse as parse_time
from core.store.events import Event

__all__ = [
    "Event",
    "Host",
    "Settings",
    "emit",
    "parse_time",
    "plain",
    "scripted",
    "worker",
    "writer",
]
