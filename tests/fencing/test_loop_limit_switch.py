"""Issue 27 item 8: the runaway-loop limit counts the `switch_workflow` moves triggers make.

Two workflows whose steps hand the task to each other on every turn's end (`switch_workflow`
under on_turn_complete) ping-pong for ever on the main this branch started from (20 arrivals
against a limit of 3); now each arrival a trigger makes is counted at the step it lands on, and
the limit stops the loop with its one WARNING. A person's `task switch-workflow` is not counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core import Host

PING_PONG = """
version: 1
type: kandev_workflow
workflows:
  - name: Ping
    max_step_arrivals: 3
    steps:
      - {name: Serve, position: 0, is_start_step: true,
         events: {on_turn_complete: [{type: switch_workflow, config: {workflow: Pong}}]}}
  - name: Pong
    max_step_arrivals: 3
    steps:
      - {name: Return, position: 0, is_start_step: true,
         events: {on_turn_complete: [{type: switch_workflow, config: {workflow: Ping}}]}}
"""


def test_item8_trigger_driven_switch_workflow_counts_towards_the_loop_limit(
    host: Host, tmp_path: Path, laneway_logs: list[dict[str, Any]]
) -> None:
    """Item 8: Ping <-> Pong by switch_workflow at every turn's end, limit 3: three arrivals
    at each step, then the trigger's move is refused (flagged, one WARNING); the task stays."""
    path = tmp_path / "ping-pong.yml"
    path.write_text(PING_PONG)
    ping, pong = host.workflows.import_file(path)
    task = host.tasks.create(workflow=ping.id, title="loop")
    session = host.sessions.start(task.id)
    hops = 0
    for _ in range(20):
        before = host.tasks.get(task.id).workflow_id
        host.turns.complete(task.id, session.id)
        if host.tasks.get(task.id).workflow_id == before:
            break
        hops += 1
    assert hops == 6  # 3 arrivals at Pong's step, 3 back at Ping's; the 7th is refused
    halted = host.tasks.get(task.id)
    assert halted.loop_halted_step_id == pong.steps[0].id
    warnings = [
        r
        for r in laneway_logs
        if r["level"] == "WARNING" and r["message"].startswith("runaway loop")
    ]
    assert len(warnings) == 1

    host.tasks.switch_workflow(task.id, workflow=pong.id)  # a person's: not refused, not counted
    assert host.tasks.get(task.id).workflow_id == pong.id
