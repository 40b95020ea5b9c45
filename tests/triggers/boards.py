"""Boards the trigger tests share: a heartbeat workflow with a runner seat."""

from __future__ import annotations

from typing import Any

from core import Host

HEARTBEAT_WORKFLOW = """
id: watch
name: Watch
steps:
  - id: todo
    name: Todo
    position: 0
    is_start_step: true
  - id: watch
    name: Watching
    position: 1
    heartbeat_seconds: {seconds}
    events:
      on_heartbeat:
        - type: queue_run
          config: {{target: primary, task_id: this, reason: heartbeat}}
  - id: done
    name: Done
    position: 2
"""


def heartbeat_board(host: Host, seconds: int, tasks: int = 1, command: str = "true") -> Any:
    """A Watch workflow whose Watching step beats every `seconds`, a runner seat there
    (profile `watcher`, running `command`), and `tasks` tasks standing at it. The workflow
    and the tasks."""
    [wf] = host.workflows.import_text(HEARTBEAT_WORKFLOW.format(seconds=seconds), source="w.yml")
    host.profiles.add("watcher", command=[command])
    host.participants.add(step="Watching", role="runner", profile="watcher", workflow=wf.id)
    made = []
    for i in range(tasks):
        task = host.tasks.create(workflow=wf.id, title=f"watched {i}")
        made.append(host.tasks.move(task.id, "Watching"))
    return wf, made
