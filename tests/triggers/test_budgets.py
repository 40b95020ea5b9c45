"""Issue 24 item 5, CLI.md `budget set --scope workspace|profile|task [--ref X] --limit-usd N
[--period total|month|day] [--thresholds P,...]` / `budget list` / `costs [--task T]
[--profile P]`: what agents reported is summed per task, profile and workspace; a run's report
that takes a scope to a threshold fires on_budget_alert on that run's task, payload
`{budget_pct, scope}`, once per scope, threshold and period (operation id
`budget:<ws>:<scope>:<ref>:<threshold>:<period start>`), even when the process dies between
the report and the delivery (the alert is queued in the report's own transaction)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from core import runs
from core.store import tables as t
from tests.conftest import open_host
from tests.interleave import Hold, race

WATCHED = """
id: spend
name: Spend
steps:
  - id: work
    name: Work
    position: 0
    is_start_step: true
    events:
      on_budget_alert:
        - type: queue_run
          config: {target: primary, task_id: this, reason: budget_alert}
  - id: done
    name: Done
    position: 1
"""


def board(host: Any) -> tuple[Any, Any, str]:
    [wf] = host.workflows.import_text(WATCHED, source="spend.yml")
    profile = host.profiles.add("spender", command=["true"])
    host.participants.add(step="Work", role="runner", profile="spender", workflow=wf.id)
    task = host.tasks.create(workflow=wf.id, title="costly")
    work = wf.step("Work")
    enqueued = host.runs.enqueue(runs.RunRequest(profile.id, task.id, work.id, "work"))
    return task, profile, enqueued.run_id


def _alerts(host: Any, task_id: str) -> list[Any]:
    return [r for r in host.runs.list(task=task_id) if r.reason == "budget_alert"]


def test_budget_alert_fires_once_per_threshold_and_period(db_url: str) -> None:
    with open_host(db_url) as host:
        task, profile, run_id = board(host)
        task_budget = host.budgets.set(
            scope="task", ref=task.id, limit_usd=1.0, thresholds=[50, 100]
        )
        host.budgets.set(scope="profile", ref="spender", limit_usd=10.0, period="day")
        host.runs.record_usage(run_id, {"cost_usd": 0.3, "input_tokens": 100})
        host.triggers.run_pass()
        assert _alerts(host, task.id) == []
        host.runs.record_usage(run_id, {"cost_usd": 0.3, "output_tokens": 7})
        assert host.triggers.run_pass().delivered == 1
        (alert,) = _alerts(host, task.id)
        assert (alert.payload["budget_pct"], alert.payload["scope"]) == (50, "task")
        assert "50% spent" in alert.payload["message"]
        ws = task.workspace_id
        op = f"budget:{ws}:task:{task.id}:50:0"
        assert host.operations.is_applied(op)

        # past 100%: the 100 alert once; more spending, another pass, another host: no more
        host.runs.record_usage(run_id, {"cost_usd": 0.5})
        host.runs.record_usage(run_id, {"cost_usd": 0.5})
        host.triggers.run_pass()
        with open_host(db_url) as other:
            assert other.triggers.run_pass().delivered == 0
        asked = sum(r.coalesced_count for r in _alerts(host, task.id))
        assert asked == 2
        assert host.operations.is_applied(f"budget:{ws}:task:{task.id}:100:0")

        costs = host.budgets.costs(task=task.id)
        assert (costs.cost_usd, costs.input_tokens, costs.output_tokens, costs.runs) == (
            1.6,
            100,
            7,
            1,
        )
        assert host.budgets.costs(profile=profile.id).cost_usd == 1.6
        listed = {b.scope: b for b in host.budgets.list()}
        assert listed["task"].id == task_budget.id
        assert listed["task"].spent_usd == 1.6
        assert listed["profile"].period == "day"
        assert host.budgets.over_budget(task.id)
        # the profile's daily budget (10 USD) is at 16%: nothing queued for it
        with host.store.read() as conn:
            fired = conn.execute(
                sa.select(t.budget_alerts.c.budget_id, t.budget_alerts.c.threshold)
            ).all()
        assert sorted(th for _b, th in fired) == [50, 100]


def test_workflow_check_names_a_budget_alert_no_budget_can_fire(db_url: str) -> None:
    """Item 6: `workflow check` says why a declared on_budget_alert cannot fire on this board
    (no budget is set), and stops saying it once one is."""
    with open_host(db_url) as host:
        [wf] = host.workflows.import_text(WATCHED, source="spend.yml")
        problems = host.workflows.check(wf.id)
        assert problems == [
            (
                "workflow 'Spend', step 'Work', events.on_budget_alert: on_budget_alert never "
                "fires: no budget is set on this board (budget set)"
            )
        ]
        host.budgets.set(scope="workspace", limit_usd=5.0)
        assert host.workflows.check(wf.id) == []


def test_the_board_asks_which_tasks_are_over_budget_at_once(db_url: str) -> None:
    """Issue 24, the board's over-budget badge: `over_budget_tasks` answers for many cards at
    once exactly as `over_budget` does for each — a task's own spent budget marks that task, a
    spent workspace budget marks every task of the workspace, an unspent one none."""
    with open_host(db_url) as host:
        task, _profile, run_id = board(host)
        wf = host.workflows.get(task.workflow_id)
        other = host.tasks.create(workflow=wf.id, title="cheap")
        cards = [task.id, other.id]
        host.runs.record_usage(run_id, {"cost_usd": 1.5})
        assert host.budgets.over_budget_tasks(cards) == set()
        host.budgets.set(scope="task", ref=task.id, limit_usd=1.0)
        assert host.budgets.over_budget_tasks(cards) == {task.id}
        host.budgets.set(scope="workspace", limit_usd=5.0)
        assert host.budgets.over_budget_tasks(cards) == {task.id}
        host.budgets.set(scope="workspace", limit_usd=1.2)
        assert host.budgets.over_budget_tasks(cards) == {task.id, other.id}
        assert {c for c in cards if host.budgets.over_budget(c)} == {task.id, other.id}


def test_two_reports_that_cross_a_threshold_together_alert_once(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs' reports under one budget at once, each below the threshold alone and over it
    together: the second one summed sees the first's cost (the budget's row is held by a
    report until it commits), so the alert fires. Each used to sum before the other committed
    and neither alerted. Here the first report is held after its sum while the second runs."""
    from core.services import budgets

    with open_host(db_url) as host:
        task, profile, first_run = board(host)
        work = host.tasks.get(task.id).workflow_step_id
        second_run = host.runs.enqueue(
            runs.RunRequest(profile.id, task.id, work, "more", coalesce_exempt=True)
        ).run_id
        host.budgets.set(scope="task", ref=task.id, limit_usd=1.0, thresholds=[100])

    hold = Hold()
    monkeypatch.setattr(budgets, "spent", hold.after(budgets.spent))

    def report(run_id: str) -> Callable[[], None]:
        def reporting() -> None:
            with open_host(db_url) as reporter:
                reporter.runs.record_usage(run_id, {"cost_usd": 0.6})

        return reporting

    race(hold, report(first_run), report(second_run))
    with open_host(db_url) as host:
        assert host.triggers.run_pass().delivered == 1
        assert len(_alerts(host, task.id)) == 1
