"""What a plugin's own command needs to drive a board: the public embedding surface.

`plugins.api` is what an action kind, a guard or an observer sees. A plugin that adds a
command (`laneway_cli_commands`) and opens the board itself, as Office's `laneway demo` does,
needs a little more: the host, the command line's settings and writer (so the global options
such as `--db` and `--json` hold for its command too), the output helpers, the board's event
value, the worker loop and the scripted test agents. Import those from here, never from
`core`'s modules, which may move.
"""

from __future__ import annotations

from core import worker
from core.cli.app import Settings, writer
from core.cli.output import emit, plain
from core.host import Host
from core.ids import parse as parse_time
from core.runtime import scripted
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
