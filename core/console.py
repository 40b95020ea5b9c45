"""The `laneway` console script's entry point: `core.cli.main` with the collector paused first.

Importing the command line and the store allocates what the process keeps for its whole life
(modules, classes, tables, compiled statements); the cyclic collector, left running, walked that
heap ~40 times while `core.cli` was imported and found nothing to free. This module imports
nothing but `gc` and `core.secrecy` beside `core` itself (whose package is small: errors and
features), so the collector is paused before the command line is imported; `core.cli.app`
resumes it once the host is open (`resume_collector`). A program that imports `core.cli`
itself (an embedding host, `build_cli()`, tests) keeps its own collector settings.

It also has loguru imported, when something first logs, as `LOGURU_AUTOINIT=0` would: this
process's logging is the command line's, which removes loguru's default handler, so it is not
built (see `core.logs`). A command that emits no record does not import loguru at all.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING

from core import logs, secrecy

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The console script (`laneway`)."""
    # First, before anything reads a secret: this process's /proc closed to its agents, and a
    # database URL given on the command line gone from the cmdline others can read.
    secrecy.hide()
    secrecy.scrub_argv(secrecy.secret_values(sys.argv[1:] if argv is None else argv))
    collecting = gc.isenabled()
    gc.disable()
    logs.without_default_handler()
    from core.cli import app

    if collecting:
        app.collector_paused_by_caller()
    app.main(argv)


def import_loguru_without_default_handler() -> None:
    """Import loguru as if `LOGURU_AUTOINIT` were false, leaving the environment as it was
    (agents and plugins see the caller's). Nothing happens if loguru is imported already."""
    if "loguru" in sys.modules:
        return
    saved = os.environ.get("LOGURU_AUTOINIT")
    os.environ["LOGURU_AUTOINIT"] = "0"
    try:
        import loguru  # noqa: F401 - imported for its side effect, without the default handler
    finally:
        if saved is None:
            del os.environ["LOGURU_AUTOINIT"]
        else:
            os.environ["LOGURU_AUTOINIT"] = saved
