"""Budgets and costs (CLI.md `budget set` / `budget list` / `costs`)."""

from __future__ import annotations

import click

from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.numbers import FINITE
from core.cli.output import emit
from core.errors import LanewayError
from core.services.budgets import PERIODS, SCOPES, Budget


def _thresholds(raw: str | None) -> list[int] | None:
    if raw is None:
        return None
    found = []
    for part in raw.split(","):
        text = part.strip()
        if not text.isdigit():
            raise LanewayError(f"--thresholds: {text!r} is not a whole percentage")
        found.append(int(text))
    return found


def _line(b: Budget) -> str:
    pct = 100.0 * b.spent_usd / b.limit_usd if b.limit_usd else 0.0
    return (
        f"{b.id}  {b.scope} {b.ref}  ${b.spent_usd:.4f} of ${b.limit_usd:g} ({pct:.0f}%) "
        f"per {b.period}  alerts at {', '.join(f'{p}%' for p in b.thresholds)}"
    )


@click.group()
def budget() -> None:
    """Spending limits: on_budget_alert fires as a scope's spending crosses them."""


@budget.command("set")
@click.option("--scope", required=True, type=click.Choice(SCOPES))
@click.option("--ref", metavar="X", help="The profile or task (default: the workspace).")
@click.option("--limit-usd", "limit_usd", required=True, type=FINITE, metavar="N")
@click.option("--period", type=click.Choice(PERIODS), default="total", show_default=True)
@click.option("--thresholds", metavar="P,...", help="Percentages of the limit [default: 80,100].")
@pass_settings
def budget_set(
    settings: Settings,
    scope: str,
    ref: str | None,
    limit_usd: float,
    period: str,
    thresholds: str | None,
) -> None:
    """Set the scope's limit for the period (replacing the one it had)."""
    with writer(settings) as host:
        found = host.budgets.set(
            scope=scope,
            ref=ref,
            limit_usd=limit_usd,
            period=period,
            thresholds=_thresholds(thresholds),
        )
    emit(settings.json, found, [_line(found)])


@budget.command("list")
@pass_settings
def budget_list(settings: Settings) -> None:
    """Every budget, with what its scope spent in the current period."""
    with reader(settings) as host:
        found = host.budgets.list()
    emit(settings.json, found, [_line(b) for b in found] or ["no budgets"])


@budget.command("remove")
@click.argument("budget_id", metavar="ID")
@pass_settings
def budget_remove(settings: Settings, budget_id: str) -> None:
    """Remove a budget: no alert fires for it any more."""
    with writer(settings) as host:
        removed = host.budgets.remove(budget_id)
    emit(settings.json, {"removed": removed}, [f"budget {removed} removed"])


@click.command("costs")
@click.option("--task", metavar="T")
@click.option("--profile", metavar="P")
@pass_settings
def costs(settings: Settings, task: str | None, profile: str | None) -> None:
    """What agents reported they spent."""
    with reader(settings) as host:
        found = host.budgets.costs(task=task, profile=profile)
    emit(
        settings.json,
        found,
        [
            (
                f"${found.cost_usd:.4f}  {found.input_tokens} input tokens, "
                f"{found.output_tokens} output tokens over {found.runs} runs"
            )
        ],
    )


COMMANDS: tuple[click.Command, ...] = (budget, costs)
