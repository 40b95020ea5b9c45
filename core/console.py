"""The `laneway` console script's entry point: `core.cli.main` with the collector paused first.

Importing the command line and the store allocates what the process keeps for its whole life
(modules, classes, tables, compiled statements); the cyclic collector, left running, walked that
heap ~40 times while `core.cli` was imported and found nothing to free. This module imports
nothing but `gc` beside `core` itself (whose package is small: errors, features, logs), so the
collector is paused before the command line is imported; `core.cli.app` resumes it once the
host is open (`resume_collector`). A program that imports `core.cli` itself (an embedding host,
`build_cli()`, tests) keeps its own collector settings.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The console script (`laneway`)."""
    collecting = gc.isenabled()
    gc.disable()
    from core.cli import app

    if collecting:
        app.collector_paused_by_caller()
    app.main(argv)
