"""The shipped guards pass the guard contract kit (plugins.testing.guard_contract):
Office's `wait_for_quorum`, with a reviewer seat at the step whose move it gates."""

from __future__ import annotations

import office_plugin
from core.host import Host
from core.model import Task
from plugins.testing.guard_contract import GuardBoard, GuardContract

REVIEWER = "guard-contract-reviewer"


class TestWaitForQuorum(GuardContract):
    plugin = office_plugin
    plugin_name = "office"
    guard = "wait_for_quorum"
    valid_config = {"role": "reviewer", "threshold": "all_approve"}
    invalid_configs = [
        {},
        {"role": "reviewer"},
        {"role": "", "threshold": "all_approve"},
        {"role": "reviewer", "threshold": "most"},
        {"role": "reviewer", "threshold": "n_approve:0"},
        "reviewer",
    ]

    def arrange_board(self, host: Host, board: GuardBoard) -> None:
        if not any(p.name == REVIEWER for p in host.profiles.list()):
            host.profiles.add(REVIEWER, command=["true"], role="reviewer")
        host.participants.add(
            step="Work", role="reviewer", profile=REVIEWER, workflow=board.workflow.id
        )

    def arrange_open(self, host: Host, board: GuardBoard, task: Task) -> None:
        (seat,) = host.participants.list(step=board.work.id, task=task.id)
        host.decisions.record(task.id, board.work.id, seat.id, "approved")
