"""The `laneway` console script's entry point, outside the `core` package on purpose.

Python imports a module's packages before the module, so an entry point inside `core` would
run `core/__init__.py` (loguru, attrs, the features) before `main` could act. Two things have
to happen before that for a command to start fast, and only in the console script's process:

- the cyclic garbage collector is paused for the start (`core.cli.app.pause_collector`):
  importing the command line and the store allocates what the process keeps for its life, and
  the collector, left running, walked it ~40 times while `core.cli` was imported;
- loguru is imported with `LOGURU_AUTOINIT=False`: laneway's command line removes loguru's
  default stderr handler anyway, and building it (its exception formatter) is ~4 ms of every
  command. The variable is set only around that import and put back as it was, so no child
  process (an agent, a hook) inherits it; a program that imports `core` itself (an embedding
  host, `build_cli()`, tests) keeps loguru's default handler.

Everything else is `core.cli.main`, unchanged.
"""

from __future__ import annotations

import gc
import os
import sys

# Not `typing.TYPE_CHECKING`: importing `typing` here would run the collector before `main`
# could pause it. Type checkers treat this name alike.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The console script (`laneway`): `core.cli.main` with the collector paused and loguru
    imported without its default handler."""
    collecting = gc.isenabled()
    gc.disable()
    if "loguru" not in sys.modules:
        _import_loguru_bare()
    from core.cli import app

    if collecting:
        app.collector_paused_by_caller()
    app.main(argv)


def _import_loguru_bare() -> None:
    before = os.environ.get("LOGURU_AUTOINIT")
    os.environ["LOGURU_AUTOINIT"] = "False"
    try:
        import loguru  # noqa: F401 - imported here for its side effect: no default handler
    finally:
        if before is None:
            del os.environ["LOGURU_AUTOINIT"]
        else:
            os.environ["LOGURU_AUTOINIT"] = before
