"""The cyclic garbage collector around a command: paused while it starts, its start frozen
out of the collector's walks once the host is open, and the heap frozen again at exit (the
console script only; `core.console`)."""

from __future__ import annotations

import gc

_collector_paused = False
"""Whether `main` paused the cyclic collector for this process's start (`pause_collector`)."""


def pause_collector() -> None:
    """Pause the cyclic garbage collector while the command starts (the console script only).

    Starting a command allocates nothing but what it keeps for its whole life: modules,
    classes, tables, compiled statements. Python's collector, which runs every 700 container
    allocations and now and then walks every object, found nothing to free there but cost a
    command tens of milliseconds (three times what it costs `python -c 'import sqlalchemy'`,
    which builds a smaller heap). `resume_collector` starts it again once the host is open.
    """
    global _collector_paused
    if gc.isenabled():
        gc.disable()
        _collector_paused = True


def collector_paused_by_caller() -> None:
    """The console script's entry (`core.console.main`) paused the collector before importing
    the command line, so that importing it runs no collection either: `main` then resumes it
    as if it had paused it itself."""
    global _collector_paused
    _collector_paused = True


def resume_collector() -> None:
    """After the start (the host is open): what was built so far lives as long as the process,
    so it moves to the collector's permanent generation (`gc.freeze`), which it never walks
    again, and the collector runs as usual for the command's own work: a long-running command
    (`serve`, `worker`) collects its garbage like any program."""
    global _collector_paused
    if _collector_paused:
        _collector_paused = False
        gc.freeze()
        gc.enable()


def freeze_for_exit() -> None:
    """The command is done: the interpreter's shutdown would walk the whole heap for cycles
    (the largest part of its exit time), to free memory the process is about to give back.
    Everything still alive moves to the permanent generation, which that walk skips; objects
    are still released by reference counting as the modules are torn down."""
    global _collector_paused
    if _collector_paused:  # no host was opened (`--help`, a usage error)
        _collector_paused = False
        gc.enable()
    gc.freeze()
