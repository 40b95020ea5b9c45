"""The demo as a person reads it: one line per timeline event, then the runs as a table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from office_plugin.demo.walk import DemoResult
from plugins.app import parse_time

_LABELS: Final = {
    "task_started": "start",
    "run_queued": "queued",
    "run_started": "run",
    "run_finished": "run",
    "run_failed": "FAILED",
    "agent_said": "agent",
    "agent_error": "recovery",
    "action": "action",
    "move": "move",
    "arrival": "arrival",
    "decision": "decision",
}


def event_line(event: Mapping[str, Any]) -> str:
    label = _LABELS.get(str(event["event"]), str(event["event"]))
    return f"{event['at']:7.2f}s  {label:<9} {event['text']}"


def summary_lines(result: DemoResult) -> list[str]:
    """The runs as a table, then one line about the outcome."""
    rows = [("#", "agent", "reason", "step", "status", "seconds")]
    for n, run in enumerate(result.runs, 1):
        seconds = "-"
        if run.claimed_at and run.finished_at:
            took = parse_time(run.finished_at) - parse_time(run.claimed_at)
            seconds = f"{took.total_seconds():.2f}"
        rows.append(
            (
                str(n),
                result.board.agent_name(run.agent_profile_id) or "-",
                run.reason,
                result.board.step_name(run.workflow_step_id) or "-",
                run.status,
                seconds,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    decisions = [e for e in result.timeline if e["event"] == "decision"]
    rounds = sorted({(e["step"], e.get("entry_seq")) for e in decisions}, key=str)
    s = result.summary
    lines.append("")
    lines.append(
        f"task {result.task_id} reached {result.final_step} ({result.task_state}): "
        f"{s.claimed} runs ({s.finished} finished, {s.failed} failed), "
        f"{len(decisions)} decisions over {len(rounds)} rounds, in {result.elapsed:.1f}s"
    )
    return lines
