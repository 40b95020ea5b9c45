"""`laneway demo`: the Office loop end to end, with scripted agents, in a few seconds.

Office's showcase, so it lives with Office and adds its command through
`laneway_cli_commands`. It builds an Office Default board on the host it is given: a worker
that fails terminally on its first run, two reviewers (the first rejects its first review, then
approves; the second always approves), an approver and a CEO, all of them the demo's own
agents (:mod:`office_plugin.demo.agents`, which act out that story on the demo's task alone
and simply do their job on any task added later). It creates one task, starts it, and runs
the worker until the task stands at Done, recording a timeline as it goes.

The timeline is read from the board's events (the `laneway_event` hook: task moved, entry
markers, runs queued/started/finished/failed, decisions, on_agent_error dispatches, agent
output), never from log records: a message reworded anywhere cannot change it. Names (agents,
steps) and a decision's comment are read through the host's services.

The timeline is a list of plain dicts (`at` seconds since the start, `event`, the names of
the step and agent involved, and `text`, one readable sentence), so the command line can print
it as it grows and `--json` can hand it over whole.

The package itself imports nothing: its agents (:mod:`office_plugin.demo.agents`) run as
``python -m office_plugin.demo.agents`` on every turn, and `-m` imports this package first,
so the names below load from their modules when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from office_plugin.demo.board import (
        DESCRIPTION,
        TEMPLATE,
        TITLE,
        Board,
        DemoFailed,
        agent_command,
        build_board,
        demo_agent_command,
    )
    from office_plugin.demo.output import event_line, summary_lines
    from office_plugin.demo.timeline import Event, OnEvent, Timeline
    from office_plugin.demo.walk import MAX_RUNS, DemoResult, require_done, run, walk

_HOME = {
    **dict.fromkeys(
        (
            "DESCRIPTION",
            "TEMPLATE",
            "TITLE",
            "Board",
            "DemoFailed",
            "agent_command",
            "build_board",
            "demo_agent_command",
        ),
        "board",
    ),
    **dict.fromkeys(("event_line", "summary_lines"), "output"),
    **dict.fromkeys(("Event", "OnEvent", "Timeline"), "timeline"),
    **dict.fromkeys(("MAX_RUNS", "DemoResult", "require_done", "run", "walk"), "walk"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # All at once, and bound here: importing `office_plugin.demo.walk` sets this package's
    # `walk` to the module, which the function of that name must replace.
    for each, home in _HOME.items():
        globals()[each] = getattr(importlib.import_module(f"{__name__}.{home}"), each)
    return globals()[name]


__all__ = [
    "DESCRIPTION",
    "MAX_RUNS",
    "TEMPLATE",
    "TITLE",
    "Board",
    "DemoFailed",
    "DemoResult",
    "Event",
    "OnEvent",
    "Timeline",
    "agent_command",
    "build_board",
    "demo_agent_command",
    "event_line",
    "require_done",
    "run",
    "summary_lines",
    "walk",
]
