"""What agents spent, and the limits on it (CLI.md `budget set` / `budget list` / `costs`).

Agents report usage per run (`runs.usage`, `RunService.record_usage`); this sums it per task,
per profile and per workspace. A budget is a limit in USD over a scope (the workspace, one
profile or one task) and a period (`total`, the calendar `month` or `day`, UTC), with the
percentages of the limit at which on_budget_alert fires (`thresholds`, default 80 and 100).

The alert: when a run's report takes a scope's spending in the period to or past a
threshold, on_budget_alert fires on that run's task, payload `{budget_pct, scope}`, once per
budget, threshold and period. `budget_alerts`' primary key decides that (a conditional
INSERT in the report's own transaction, kept for good), and the trigger is queued in the
same transaction (`core.outbox`) under the operation id
`budget:<workspace>:<scope>:<ref>:<threshold>:<period start, Unix seconds>`.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import attrs
import sqlalchemy as sa

from core import ids, outbox
from core.errors import LanewayError, NotFound
from core.numbers import NOT_FINITE, finite
from core.services.base import Lazy, Service
from core.store import tables as t
from core.store.database import UnitOfWork

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.profiles import ProfileService
    from core.services.tasks import TaskService
    from core.services.workspace import WorkspaceService

B = t.budgets
A = t.budget_alerts
R = t.runs
TASKS = t.tasks
SCOPES: Final = ("workspace", "profile", "task")
PERIODS: Final = ("total", "month", "day")
DEFAULT_THRESHOLDS: Final = (80, 100)


@attrs.frozen
class Budget:
    id: str
    workspace_id: str
    scope: str
    ref: str
    limit_usd: float
    period: str
    thresholds: tuple[int, ...]
    created_at: str
    updated_at: str
    spent_usd: float = 0.0
    """Spent in the current period (as read when the budget was listed)."""


@attrs.frozen
class Costs:
    """What runs reported (CLI.md `costs`): `runs` counts the runs that reported anything."""

    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    runs: int = 0


def period_start(period: str, at: datetime | None = None) -> datetime:
    """Where the current period began: the epoch for `total`, else the month's or day's
    first moment (UTC)."""
    at = at or datetime.now(UTC)
    if period == "month":
        return at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return at.replace(hour=0, minute=0, second=0, microsecond=0)
    return datetime(1970, 1, 1, tzinfo=UTC)


def operation_id(budget: Budget, threshold: int, start: datetime) -> str:
    return (
        f"budget:{budget.workspace_id}:{budget.scope}:{budget.ref}:{threshold}:"
        f"{int(start.timestamp())}"
    )


def _budget(row: sa.RowMapping, spent: float = 0.0) -> Budget:
    return Budget(
        id=row["id"],
        workspace_id=row["workspace_id"],
        scope=row["scope"],
        ref=row["ref"],
        limit_usd=float(row["limit_usd"]),
        period=row["period"],
        thresholds=tuple(int(p) for p in json.loads(row["thresholds"])),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        spent_usd=spent,
    )


def _scope_filter(scope: str, ref: str) -> sa.ColumnElement[bool]:
    if scope == "task":
        return R.c.task_id == ref
    if scope == "profile":
        return R.c.agent_profile_id == ref
    in_workspace = sa.select(TASKS.c.id).where(TASKS.c.workspace_id == ref)
    return R.c.task_id.in_(in_workspace)


def _sum(usages: Iterable[str | None]) -> Costs:
    cost, inp, out, count = 0.0, 0, 0, 0
    for raw in usages:
        if not raw:
            continue
        usage = json.loads(raw)
        cost += float(usage.get("cost_usd") or 0)
        inp += int(usage.get("input_tokens") or 0)
        out += int(usage.get("output_tokens") or 0)
        count += 1
    return Costs(round(cost, 10), inp, out, count)


def spent(conn: sa.Connection, scope: str, ref: str, since: datetime) -> float:
    """USD reported by the scope's runs requested since `since`."""
    query = sa.select(R.c.usage).where(_scope_filter(scope, ref), R.c.usage.is_not(None))
    if since.year > 1970:
        query = query.where(R.c.requested_at >= ids.format_ts(since))
    return _sum(conn.execute(query).scalars()).cost_usd


def check_run(uow: UnitOfWork, run_id: str) -> builtins.list[str]:
    """After a run's report (in its transaction): each budget over the run's task, profile or
    workspace whose spending reached a threshold not yet alerted in this period is alerted,
    on_budget_alert queued on the run's task. The operation ids queued."""
    run = uow.conn.execute(
        sa.select(R.c.task_id, R.c.agent_profile_id).where(R.c.id == run_id)
    ).first()
    if run is None:
        return []
    task_id, profile_id = run
    workspace_id = None
    if task_id is not None:
        workspace_id = uow.conn.execute(
            sa.select(TASKS.c.workspace_id).where(TASKS.c.id == task_id)
        ).scalar()
    wanted = [("profile", profile_id), ("task", task_id), ("workspace", workspace_id)]
    scopes = [sa.and_(B.c.scope == s, B.c.ref == r) for s, r in wanted if r is not None]
    # the budgets' rows held until the report commits (PostgreSQL; SQLite's writers are
    # serialised), in one order: two reports under one budget are summed one after the
    # other, the second seeing the first's cost, so the threshold they cross together is seen
    held = sa.select(B).where(sa.or_(*scopes)).order_by(B.c.id).with_for_update()
    budgets = [_budget(r) for r in uow.conn.execute(held).mappings()]
    queued = []
    for budget in budgets:
        start = period_start(budget.period)
        used = spent(uow.conn, budget.scope, budget.ref, start)
        pct = 100.0 * used / budget.limit_usd if budget.limit_usd > 0 else 0.0
        for threshold in budget.thresholds:
            if pct < threshold:
                continue
            added = uow.conn.execute(
                sa.text(
                    "INSERT INTO budget_alerts (budget_id, threshold, period_start, task_id, "
                    "created_at) VALUES (:a_budget, :a_threshold, :a_start, :a_task, :a_at) "
                    "ON CONFLICT (budget_id, threshold, period_start) DO NOTHING"
                ),
                {
                    "a_budget": budget.id,
                    "a_threshold": threshold,
                    "a_start": str(int(start.timestamp())),
                    "a_task": task_id,
                    "a_at": ids.now(),
                },
            ).rowcount
            if added != 1 or task_id is None:
                continue
            op = operation_id(budget, threshold, start)
            payload = {
                "budget_pct": threshold,
                "scope": budget.scope,
                "budget_id": budget.id,
                "spent_usd": used,
                "limit_usd": budget.limit_usd,
            }
            outbox.put(uow, op, task_id, "on_budget_alert", payload)
            queued.append(op)
    return queued


class BudgetService(Service):
    """Spending limits and what was spent."""

    def __init__(
        self,
        peers: Peers,
        *,
        profiles: Lazy[ProfileService],
        tasks: Lazy[TaskService],
        workspace: Lazy[WorkspaceService],
    ) -> None:
        super().__init__(peers)
        self._profiles = profiles
        self._tasks = tasks
        self._workspace = workspace

    def set(
        self,
        *,
        scope: str,
        limit_usd: float,
        ref: str | None = None,
        period: str = "total",
        thresholds: Iterable[int] | None = None,
    ) -> Budget:
        """Set (or replace) the scope's limit for the period."""
        self._require_writer()
        if scope not in SCOPES:
            raise LanewayError(f"budget scope {scope!r}: must be one of {', '.join(SCOPES)}")
        if period not in PERIODS:
            raise LanewayError(f"budget period {period!r}: must be one of {', '.join(PERIODS)}")
        if isinstance(limit_usd, bool) or not isinstance(limit_usd, int | float):
            raise LanewayError("budget limit: must be a number")
        if finite(limit_usd) is None:
            raise LanewayError(f"budget limit: {limit_usd} {NOT_FINITE}")
        if not limit_usd > 0:
            raise LanewayError(f"budget limit: must be more than 0, got {finite(limit_usd)}")
        wanted = sorted(set(DEFAULT_THRESHOLDS if thresholds is None else thresholds))
        if not wanted or any(
            isinstance(p, bool) or not isinstance(p, int) or p <= 0 for p in wanted
        ):
            raise LanewayError(f"budget thresholds {wanted}: must be whole percentages above 0")
        ref_id, workspace_id = self._ref(scope, ref)
        stamp = ids.now()
        with self.peers.store.transaction() as uow:
            row = uow.conn.execute(
                sa.select(B.c.id).where(B.c.scope == scope, B.c.ref == ref_id, B.c.period == period)
            ).scalar()
            values = {
                "limit_usd": float(limit_usd),
                "thresholds": json.dumps(wanted),
                "updated_at": stamp,
            }
            if row is None:
                budget_id = ids.new_id()
                uow.conn.execute(
                    sa.insert(B).values(
                        id=budget_id,
                        workspace_id=workspace_id,
                        scope=scope,
                        ref=ref_id,
                        period=period,
                        created_at=stamp,
                        **values,
                    )
                )
            else:
                budget_id = str(row)
                uow.conn.execute(sa.update(B).where(B.c.id == budget_id).values(**values))
        return self.get(budget_id)

    def _ref(self, scope: str, ref: str | None) -> tuple[str, str]:
        """The scope's id and its workspace's."""
        if scope == "workspace":
            workspace = self._workspace().get() if ref is None else self._workspace().by_id(ref)
            return workspace.id, workspace.id
        if ref is None:
            raise LanewayError(f"budget --scope {scope}: --ref names the {scope}")
        if scope == "task":
            task = self._tasks().get(ref)
            return task.id, task.workspace_id
        profile = self._profiles().get(ref)
        return profile.id, self._workspace().get().id

    def remove(self, budget_id: str) -> str:
        """Remove a budget; its alerts go with it (no alert fires for it any more)."""
        self._require_writer()
        with self.peers.store.transaction() as uow:
            gone = uow.conn.execute(
                sa.delete(B).where(B.c.id == budget_id).execution_options(preserve_rowcount=True)
            ).rowcount
        if gone != 1:
            raise NotFound(f"no budget {budget_id!r}")
        return budget_id

    def get(self, budget_id: str) -> Budget:
        with self.peers.store.read() as conn:
            row = conn.execute(sa.select(B).where(B.c.id == budget_id)).mappings().first()
            if row is None:
                raise NotFound(f"no budget {budget_id!r}")
            budget = _budget(row)
            used = spent(conn, budget.scope, budget.ref, period_start(budget.period))
        return attrs.evolve(budget, spent_usd=used)

    def list(self) -> builtins.list[Budget]:
        """Every budget, with what its scope spent in the current period."""
        with self.peers.store.read() as conn:
            found = [
                _budget(r)
                for r in conn.execute(sa.select(B).order_by(B.c.created_at, B.c.id)).mappings()
            ]
            return [
                attrs.evolve(b, spent_usd=spent(conn, b.scope, b.ref, period_start(b.period)))
                for b in found
            ]

    def costs(self, *, task: str | None = None, profile: str | None = None) -> Costs:
        """What agents reported they spent, over every run, one task's, one profile's, or
        both filters together."""
        query = sa.select(R.c.usage).where(R.c.usage.is_not(None))
        if task is not None:
            query = query.where(R.c.task_id == self._tasks().get(task).id)
        if profile is not None:
            query = query.where(R.c.agent_profile_id == self._profiles().get(profile).id)
        with self.peers.store.read() as conn:
            return _sum(conn.execute(query).scalars())

    def over_budget_tasks(self, task_ids: builtins.list[str]) -> builtins.set[str]:
        """Which of the tasks a budget over them (their own, their workspace's) is spent to
        its limit in the current period: each budget's spending read once, whatever the
        number of tasks (the board asks for every card at once)."""
        wanted = set(task_ids)
        with self.peers.store.read() as conn:
            budgets = [
                _budget(r)
                for r in conn.execute(
                    sa.select(B).where(B.c.scope.in_(("task", "workspace")))
                ).mappings()
            ]
            spent_out = [
                b
                for b in budgets
                if (b.scope == "workspace" or b.ref in wanted)
                and spent(conn, b.scope, b.ref, period_start(b.period)) >= b.limit_usd
            ]
            found = {b.ref for b in spent_out if b.scope == "task"}
            workspaces = {b.ref for b in spent_out if b.scope == "workspace"}
            if workspaces:
                found |= {
                    task_id
                    for (task_id,) in conn.execute(
                        sa.select(TASKS.c.id).where(TASKS.c.workspace_id.in_(workspaces))
                    )
                }
        return {task_id for task_id in found if task_id in wanted}

    def over_budget(self, task_id: str) -> bool:
        """Whether a budget over the task (its own, or its workspace's) is spent to its limit
        in the current period."""
        with self.peers.store.read() as conn:
            workspace_id = conn.execute(
                sa.select(TASKS.c.workspace_id).where(TASKS.c.id == task_id)
            ).scalar()
            found = [
                _budget(r)
                for r in conn.execute(
                    sa.select(B).where(
                        sa.or_(
                            sa.and_(B.c.scope == "task", B.c.ref == task_id),
                            sa.and_(B.c.scope == "workspace", B.c.ref == workspace_id),
                        )
                    )
                ).mappings()
            ]
            return any(
                spent(conn, b.scope, b.ref, period_start(b.period)) >= b.limit_usd for b in found
            )
