"""The `wait_for_quorum` guard: a transition waits until the step's seats have decided.

Slate for role R at step S: the task's own seats at any step of its workflow plus the template
seats at S; one seat per (role, agent), a per-task seat beating a template one and a seat at S
beating one elsewhere; then keep role R with a decision required. Each seat's latest decision
at S counts. An empty slate never passes (fails closed).

The reference filters by `decision_required` before collapsing, so a per-task seat saying "this
agent need not decide here" cannot override the template seat. We collapse first: a per-task
seat overrides the template seat in every respect, as the merged participant list shows it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from plugins.api import (
    ConfigError,
    Decision,
    GuardContext,
    GuardKind,
    GuardResult,
    Participant,
)

THRESHOLDS = ("all_approve", "all_decide", "majority_approve", "any_reject")
N_APPROVE = re.compile(r"^n_approve:(\d+)$")
REJECTIONS = frozenset({"rejected", "changes_requested"})


@attrs.frozen
class Quorum:
    role: str
    threshold: str


def validate(config: Mapping[str, Any]) -> Quorum:
    if not isinstance(config, Mapping):
        raise ConfigError("wait_for_quorum must be a mapping", field="wait_for_quorum")
    role, threshold = config.get("role"), config.get("threshold")
    if not isinstance(role, str) or not role:
        raise ConfigError("wait_for_quorum needs a role", field="wait_for_quorum.role")
    if not isinstance(threshold, str) or not threshold:
        raise ConfigError("wait_for_quorum needs a threshold", field="wait_for_quorum.threshold")
    match = N_APPROVE.match(threshold)
    if threshold not in THRESHOLDS and not (match and int(match.group(1)) > 0):
        raise ConfigError(
            f"wait_for_quorum threshold {threshold!r}: use one of {', '.join(THRESHOLDS)} "
            "or n_approve:N with N > 0",
            field="wait_for_quorum.threshold",
        )
    return Quorum(role, threshold)


def slate(rows: Iterable[Participant], role: str, step_id: str) -> list[Participant]:
    of_role = [r for r in rows if r.role == role]
    # Per (task, role, agent): prefer the seat at this step, then the lowest id.
    canonical: dict[tuple[str, str, str], Participant] = {}
    for seat in sorted(of_role, key=lambda s: (s.step_id != step_id, s.id)):
        canonical.setdefault((seat.task_id, seat.role, seat.agent_profile_id), seat)
    # Per (role, agent): a per-task seat beats a template seat.
    collapsed: dict[tuple[str, str], Participant] = {}
    for seat in sorted(canonical.values(), key=lambda s: (s.task_id == "", s.id)):
        collapsed.setdefault((seat.role, seat.agent_profile_id), seat)
    required = [s for s in collapsed.values() if s.decision_required]
    return sorted(required, key=lambda s: (s.position, s.id))


def latest_verdicts(seats: list[Participant], decisions: list[Decision]) -> dict[str, str]:
    """Seat id -> its latest verdict. Decisions map by seat id, else by (role, agent)."""
    by_id = {s.id: s for s in seats}
    by_agent = {(s.role, s.agent_profile_id): s for s in seats}
    latest: dict[str, str] = {}
    for d in sorted(decisions, key=lambda d: (d.decided_at, d.id)):
        seat = by_id.get(d.participant_id)
        if seat is None and d.decider_type == "agent":
            seat = by_agent.get((d.role, d.decider_id))
        if seat is not None:
            latest[seat.id] = d.decision
    return latest


def any_reject(decisions: list[Decision], role: str) -> bool:
    latest: dict[tuple[str, str], str] = {}
    for d in sorted(decisions, key=lambda d: (d.decided_at, d.id)):
        if d.decider_type == "agent" and d.role != role:
            continue
        latest[(d.decider_type, d.decider_id or d.participant_id)] = d.decision
    return any(v in REJECTIONS for v in latest.values())


def judge(quorum: Quorum, seats: list[Participant], decisions: list[Decision]) -> GuardResult:
    if quorum.threshold == "any_reject":
        vetoed = any_reject(decisions, quorum.role)
        return GuardResult(vetoed, "" if vetoed else "threshold_not_met", {"required": 1})
    if not seats:
        return GuardResult(False, "slate_empty", {"required": 0})
    verdicts = latest_verdicts(seats, decisions)
    approved = sum(1 for s in seats if verdicts.get(s.id) == "approved")
    decided = sum(1 for s in seats if s.id in verdicts)
    detail = {"required": len(seats), "approved": approved, "decided": decided}
    match = N_APPROVE.match(quorum.threshold)
    if match:
        n = int(match.group(1))
        if n > len(seats):
            return GuardResult(False, "threshold_unsatisfiable", detail)
        ok = approved >= n
    elif quorum.threshold == "all_approve":
        ok = approved == len(seats)
    elif quorum.threshold == "all_decide":
        ok = decided == len(seats)
    elif quorum.threshold == "majority_approve":
        ok = 2 * approved > len(seats)
    else:
        return GuardResult(False, "threshold_unrecognized", detail)
    return GuardResult(ok, "" if ok else "threshold_not_met", detail)


def evaluate(ctx: GuardContext, quorum: Quorum) -> GuardResult:
    host = ctx.services
    rows = host.participants.quorum_rows(ctx.task, ctx.step)
    decisions = host.decisions.list(ctx.task.id, ctx.step.id)
    return judge(quorum, slate(rows, quorum.role, ctx.step.id), decisions)


GUARD = GuardKind(
    "wait_for_quorum",
    validate=validate,
    evaluate=evaluate,
    feature="office",
    description="hold a transition until the step's seats of a role reach a threshold",
)
