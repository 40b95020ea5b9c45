from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa

from core import actors, ids, runs
from core.errors import LanewayError, RunFenced
from core.model import VERDICTS, Decision
from core.services.base import Lazy, Service
from core.store import events, rows
from core.store import tables as t
from core.store.database import UnitOfWork
from core.text import MAX_COMMENT, cut_to, require_text

if TYPE_CHECKING:
    from core.services.participants import ParticipantService
    from core.services.peers import Peers
    from core.services.tasks import TaskService
    from core.services.workflows import WorkflowService

D = t.workflow_step_decisions
# One UPDATE, not a read then a write: its commit is the line every concurrently recorded
# decision falls on (AC-F3), as the DELETE it replaced was; the earlier round stays readable.
_CLEAR = (
    sa.update(D)
    .where(
        D.c.task_id == sa.bindparam("task_id"),
        D.c.step_id == sa.bindparam("step_id"),
        D.c.cleared_at.is_(None),
    )
    .values(cleared_at=sa.bindparam("stamp"))
)


def _rounds(found: list[Decision]) -> list[Decision]:
    """`found` (one task and step) with each decision's round: the cleared ones numbered by
    the clear that closed their round, oldest first; the standing ones one past the last."""
    closes = sorted({d.cleared_at for d in found if d.cleared_at is not None})
    number = {stamp: i + 1 for i, stamp in enumerate(closes)}
    current = len(closes) + 1
    return [
        attrs.evolve(d, round=number[d.cleared_at] if d.cleared_at is not None else current)
        for d in found
    ]


class DecisionService(Service):
    """Participant verdicts, and the guarded transitions they may release."""

    def __init__(
        self,
        peers: Peers,
        *,
        participants: Lazy[ParticipantService],
        tasks: Lazy[TaskService],
        workflows: Lazy[WorkflowService],
    ) -> None:
        super().__init__(peers)
        self._participants = participants
        self._tasks = tasks
        self._workflows = workflows

    def record(
        self,
        task: str,
        step: str,
        participant: str,
        verdict: str,
        *,
        comment: str = "",
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Record a seat's verdict (superseding its earlier one), then re-evaluate the step's
        guarded on_turn_complete transitions with a compare-and-set on the task's step.

        With `run_id` (an agent's verdict, given during a run), the seat records at most one
        verdict for that run: a re-run of the run (its worker died after the verdict) replaces
        nothing and adds nothing, decided by the unique (run_id, participant_id) index. The
        result's `recorded` says whether this call added the decision. A run's verdict is
        refused (`RunFenced`) when the run's claim is no longer this process's or the entry
        that queued it is superseded (core.runs.fence)."""
        self._require_writer()
        if verdict not in VERDICTS:
            raise LanewayError(f"verdict {verdict!r}: must be one of {', '.join(VERDICTS)}")
        require_text(comment, "verdict comment", MAX_COMMENT)
        task_row = self._tasks().get(task)
        if task_row.workflow_id is None:
            raise LanewayError(f"task {task_row.id} is not in a workflow")
        wf = self._workflows().by_id(task_row.workflow_id)
        step_row = self._workflows().step(wf, step)
        seat = self._participants().get(participant)
        if seat.step_id != step_row.id or seat.task_id not in ("", task_row.id):
            raise LanewayError(
                f"participant {participant} has no seat at step {step_row.name!r} for this task"
            )
        with self.peers.store.transaction() as uow:
            stamp = ids.now()  # in the transaction: see events.in_commit_order
            decision = Decision(
                id=ids.new_id(),
                task_id=task_row.id,
                step_id=step_row.id,
                participant_id=seat.id,
                decision=verdict,
                comment=comment,
                decided_at=stamp,
                decider_type="agent",
                decider_id=seat.agent_profile_id,
                role=seat.role,
                run_id=run_id,
                actor=actors.current(),
            )
            if run_id is not None:
                # a verdict is the run's outcome: only its live claim, in its own round, gives it
                refused = runs.fence(uow, run_id, uow.store.liveness.own())
                if refused is not None:
                    raise RunFenced(run_id, refused)
            try:
                with self.peers.store.isolated():
                    uow.conn.execute(
                        sa.insert(D).values(
                            **{f: getattr(decision, f) for f in (c.name for c in D.columns)}
                        )
                    )
            except sa.exc.IntegrityError:
                if run_id is None:
                    raise
                kept = (
                    uow.conn.execute(
                        sa.select(D).where(D.c.run_id == run_id, D.c.participant_id == seat.id)
                    )
                    .mappings()
                    .one()
                )
                return {
                    "decision": rows.decision(kept),
                    "transitioned": False,
                    "to_step_id": None,
                    "recorded": False,
                }
            uow.conn.execute(
                sa.update(D)
                .where(
                    D.c.id != decision.id,
                    D.c.task_id == task_row.id,
                    D.c.step_id == step_row.id,
                    D.c.superseded_at.is_(None),
                    # an earlier round's verdict stays as that round left it
                    D.c.cleared_at.is_(None),
                    sa.or_(
                        D.c.participant_id == seat.id,
                        sa.and_(D.c.decider_id == seat.agent_profile_id, D.c.role == seat.role),
                    ),
                )
                .values(superseded_at=stamp)
            )
            events.record(
                uow,
                "decision.recorded",
                task_row.id,
                step_id=step_row.id,
                participant_id=seat.id,
                verdict=verdict,
                decision_id=decision.id,
            )
            # the feedback cursor (a run's claim time) never passes a verdict its run missed
            at = events.in_commit_order(uow, D.c.decided_at, decision.id, stamp)
            decision = attrs.evolve(decision, decided_at=at)
            closed = uow.conn.execute(
                sa.select(sa.func.count(sa.distinct(D.c.cleared_at))).where(
                    D.c.task_id == task_row.id, D.c.step_id == step_row.id
                )
            ).scalar()
        decision = attrs.evolve(decision, round=int(closed or 0) + 1)
        result = self.peers.engine.after_decision(task_row.id, step_row.id)
        return {
            "decision": decision,
            "transitioned": result.transitioned,
            "to_step_id": result.to_step_id,
            "recorded": True,
            "refusals": [{"guard": g, "reason": r} for g, r in result.refusals],
            "halted": result.halted,
        }

    def clear(self, uow: UnitOfWork, task_id: str, step_id: str) -> int:
        """Close the step's current review round for the task: its decisions are stamped
        cleared (kept for `decision list --all`, no longer counted). ONE statement, in the
        caller's unit of work, whose commit is the line every concurrently recorded decision
        falls on. The count of decisions it cleared."""
        params = {"task_id": task_id, "step_id": step_id, "stamp": ids.now()}
        return int(uow.run(_CLEAR, params).rowcount)

    def record_for_agent(
        self,
        task_id: str,
        step_id: str | None,
        agent_profile_id: str | None,
        verdict: str,
        *,
        comment: str = "",
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """An agent's verdict, recorded for its deciding seat at the step it worked on (once
        per run: see `record`)."""
        if not step_id or not agent_profile_id:
            raise LanewayError("a decision needs the step and the agent that made it")
        # the agent's words as they came (NUL replaced, as in its transcript), cut to the
        # comment bound: its verdict counts whatever it wrote beside it
        comment = cut_to(comment.replace("\x00", "\ufffd"), MAX_COMMENT)
        comment = comment.encode("utf-8", "replace").decode("utf-8")
        seat = next(
            (
                s
                for s in self._participants().seats_at(task_id, step_id)
                if s.agent_profile_id == agent_profile_id and s.role in ("approver", "reviewer")
            ),
            None,
        )
        if seat is None:
            raise LanewayError(f"agent {agent_profile_id} has no deciding seat at step {step_id}")
        return self.record(task_id, step_id, seat.id, verdict, comment=comment, run_id=run_id)

    def list(self, task_id: str, step_id: str) -> builtins.list[Decision]:
        """The current round's decisions at the step (what the quorum counts), superseded ones
        included, oldest first."""
        return [d for d in self.rounds(task_id, step_id) if not d.cleared]

    def rounds(self, task_id: str, step_id: str | None = None) -> builtins.list[Decision]:
        """Every round's decisions for the task (at one step, or at all of them), cleared ones
        included, each with its `round`; oldest first."""
        query = sa.select(D).where(D.c.task_id == task_id)
        if step_id is not None:
            query = query.where(D.c.step_id == step_id)
        with self.peers.store.read() as conn:
            found = [
                rows.decision(r)
                for r in conn.execute(query.order_by(D.c.decided_at, D.c.id)).mappings()
            ]
        by_step: dict[str, builtins.list[Decision]] = {}
        for d in found:
            by_step.setdefault(d.step_id, []).append(d)
        numbered = {d.id: d for group in by_step.values() for d in _rounds(group)}
        return [numbered[d.id] for d in found]

    def for_task(
        self, task_ref: str, step: str | None = None, *, all_rounds: bool = False
    ) -> builtins.list[Decision]:
        """`decision list`: the task's decisions at `step` (name or id; default every step),
        the current round's only unless `all_rounds`."""
        task_row = self._tasks().get(task_ref)
        step_id: str | None = None
        if step is not None:
            if task_row.workflow_id is None:
                raise LanewayError(f"task {task_row.id} is not in a workflow")
            wf = self._workflows().by_id(task_row.workflow_id)
            step_id = self._workflows().step(wf, step).id
        found = self.rounds(task_row.id, step_id)
        return found if all_rounds else [d for d in found if not d.cleared]
