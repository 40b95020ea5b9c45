"""The `laneway` command line. `main` is the console script; `build_cli` makes the group."""

from core.cli.app import build_cli, main

__all__ = ["build_cli", "main"]
