"""CLI.md `budget set --scope workspace|profile|task [--ref X] --limit-usd N [--period
total|month|day] [--thresholds P,...]` / `budget list` (budget / [budget]) and `costs [--task
T] [--profile P]` (`{"cost_usd", "input_tokens", "output_tokens", "runs"}`); bad input is one
line. The alert itself: tests/triggers/test_budgets.py."""

from __future__ import annotations

from tests.cli.conftest import Laneway
from tests.conftest import open_host
from tests.triggers.test_budgets import board


def test_budget_and_costs_commands(laneway: Laneway) -> None:
    with open_host(laneway.url) as host:
        task, _profile, run_id = board(host)
        host.runs.record_usage(run_id, {"cost_usd": 0.25, "input_tokens": 3, "output_tokens": 2})
    made = laneway.json(
        "budget", "set", "--scope", "workspace", "--limit-usd", "5", "--period", "month",
        "--thresholds", "25,50",
    )  # fmt: skip
    assert (made["scope"], made["period"], made["thresholds"], made["limit_usd"]) == (
        "workspace",
        "month",
        [25, 50],
        5.0,
    )
    assert made["ref"] == task.workspace_id
    assert made["spent_usd"] == 0.25
    again = laneway.json(
        "budget", "set", "--scope", "workspace", "--limit-usd", "2", "--period", "month"
    )
    assert again["id"] == made["id"]
    assert again["thresholds"] == [80, 100]
    assert [b["id"] for b in laneway.json("budget", "list")] == [made["id"]]
    assert laneway.json("costs") == {
        "cost_usd": 0.25,
        "input_tokens": 3,
        "output_tokens": 2,
        "runs": 1,
    }
    assert laneway.json("costs", "--task", task.id)["runs"] == 1
    assert laneway.json("costs", "--profile", "spender")["cost_usd"] == 0.25
    assert "--ref" in laneway.fails("budget", "set", "--scope", "task", "--limit-usd", "1")
    assert "thresholds" in laneway.fails(
        "budget", "set", "--scope", "workspace", "--limit-usd", "1", "--thresholds", "x"
    )
    assert "more than 0" in laneway.fails(
        "budget", "set", "--scope", "workspace", "--limit-usd", "0"
    )
    assert "nope" in laneway.fails("costs", "--task", "nope")
    text = laneway.run("costs").stdout
    assert "$0.2500" in text
