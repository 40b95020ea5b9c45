"""The shipped plugins pass the action-kind contract kit (plugins.testing.contract).

A representative set: every Office durable kind, and kanban session kinds with and without a
config (configure_session also exercises a kind that has no owner on E4). Each class only
declares what the kit asks: the plugin, the kind, configs, and how to count its effect.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

import kanban_plugin
import office_plugin
from core import ids
from core.host import Host
from core.model import Task
from core.store import tables as t
from plugins.testing.arrivals import Board
from plugins.testing.contract import ActionKindContract

REVIEWER = "contract-reviewer"


def _reviewer_seat(host: Host, board: Board) -> None:
    """A reviewer seat at Target for every task of the board."""
    try:
        host.profiles.get(REVIEWER)
    except Exception:  # noqa: BLE001 - not there yet
        host.profiles.add(REVIEWER, command=["true"], role="reviewer")
    host.participants.add(
        step="Target", role="reviewer", profile=REVIEWER, workflow=board.workflow.id
    )


def _runs(host: Host, task: Task) -> int:
    return len(host.runs.list(task=task.id))


def _session_meta(host: Host, task: Task) -> dict[str, Any]:
    sessions = host.sessions.list(task=task.id)
    return dict(sessions[-1].metadata) if sessions else {}


class OfficeKind(ActionKindContract):
    plugin = office_plugin
    plugin_name = "office"


class KanbanKind(ActionKindContract):
    plugin = kanban_plugin
    plugin_name = "kanban"
    needs_session = True


class TestClearDecisions(OfficeKind):
    """Transactional and halting: the replay and crash checks do not apply (no window between
    effect and marker); its config is empty, so no failing config exists."""

    kind = "clear_decisions"
    invalid_configs = [{"role": "reviewer"}]

    def arrange(self, host: Host, board: Board, task: Task) -> None:
        # A decision from the previous round at Target, which the entry must clear.
        with host.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.workflow_step_decisions).values(
                    id=ids.new_id(),
                    task_id=task.id,
                    step_id=board.target.id,
                    participant_id="previous-round",
                    decision="approved",
                    decided_at=ids.now(),
                )
            )

    def effect_probe(self, host: Host, task: Task) -> int:
        """1 once the seeded decision no longer stands (the clear took effect), else 0. Issue
        22 keeps a cleared round readable (`decision list --all`): the row stays, stamped."""
        d = t.workflow_step_decisions
        with host.store.read() as conn:
            left = conn.execute(
                sa.select(sa.func.count())
                .select_from(d)
                .where(d.c.task_id == task.id, d.c.cleared_at.is_(None))
            ).scalar_one()
        return 0 if left else 1


class TestQueueRunForEachParticipant(OfficeKind):
    kind = "queue_run_for_each_participant"
    valid_config = {"role": "reviewer", "reason": "review_started"}
    invalid_configs = [{}, {"role": "nobody"}, {"role": "reviewer", "reason": ""}]
    failing_config = {"role": "reviewer"}
    supports_replay_key = True

    def arrange_board(self, host: Host, board: Board) -> None:
        _reviewer_seat(host, board)

    def arrange_failure(self, host: Host, board: Board, task: Task) -> None:
        # A seat with no agent: its enqueue fails, the others' still land (collect-and-continue).
        with host.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.workflow_step_participants).values(
                    id=ids.new_id(),
                    step_id=board.target.id,
                    task_id=task.id,
                    role="reviewer",
                    agent_profile_id="",
                    decision_required=True,
                    position=1,
                    created_at=ids.now(),
                )
            )

    def effect_probe(self, host: Host, task: Task) -> int:
        return _runs(host, task)


class TestQueueRun(OfficeKind):
    kind = "queue_run"
    valid_config = {"target": "participant_role:reviewer"}
    invalid_configs = [{"target": "somewhere"}, {"target": "participant_role:"}, {"task_id": ""}]
    failing_config = {"target": "participant_role:reviewer", "task_id": "no-such-task"}
    supports_replay_key = True

    def arrange_board(self, host: Host, board: Board) -> None:
        _reviewer_seat(host, board)

    def effect_probe(self, host: Host, task: Task) -> int:
        return _runs(host, task)


class TestRunCodeReview(OfficeKind):
    """At-least-once across a crash by design (the spec's AC-A8 carve-out): it does not use
    the key, so the replay checks are skipped and the crash check allows one repeat."""

    kind = "run_code_review"
    invalid_configs = [{"agent_profile_id": 5}]
    supports_replay_key = False

    def effect_probe(self, host: Host, task: Task) -> int:
        r = t.task_review_runs
        with host.store.read() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count()).select_from(r).where(r.c.task_id == task.id)
                ).scalar_one()
            )


class TestEnsureParticipantSeat(OfficeKind):
    """An upsert: replaying it finds the seat it made, so it repeats no effect."""

    kind = "ensure_participant_seat"
    valid_config = {"role": "reviewer", "agent_profile_id": REVIEWER}
    invalid_configs = [
        {"role": "boss", "agent_profile_id": REVIEWER},
        {"role": "reviewer"},
        {"role": "reviewer", "agent_profile_id": REVIEWER, "decision_required": "yes"},
    ]
    failing_config = {"role": "reviewer", "agent_profile_id": "no-such-profile"}
    supports_replay_key = True

    def arrange_board(self, host: Host, board: Board) -> None:
        try:
            host.profiles.get(REVIEWER)
        except Exception:  # noqa: BLE001 - not there yet
            host.profiles.add(REVIEWER, command=["true"], role="reviewer")

    def effect_probe(self, host: Host, task: Task) -> int:
        p = t.workflow_step_participants
        with host.store.read() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count()).select_from(p).where(p.c.task_id == task.id)
                ).scalar_one()
            )


class TestSetSessionMode(KanbanKind):
    kind = "set_session_mode"
    valid_config = {"mode": "review"}
    invalid_configs = [{}, {"mode": ""}, {"mode": 3}]

    def effect_probe(self, host: Host, task: Task) -> int:
        return int(_session_meta(host, task).get("session_mode") == "review")


class TestEnablePlanMode(KanbanKind):
    kind = "enable_plan_mode"

    def effect_probe(self, host: Host, task: Task) -> int:
        return int(_session_meta(host, task).get("plan_mode") is True)


class TestConfigureSession(KanbanKind):
    """No owner on E4 (spec AC-A2): the kit expects it skipped there with a warning."""

    kind = "configure_session"
    valid_config = {"rules": [{"agent_name": "claude", "operation": "keep"}]}
    invalid_configs = [
        {},
        {"rules": []},
        {"rules": [{"agent_name": "claude", "operation": "replace"}]},
        {"rules": [{"agent_name": "claude", "operation": "set"}]},
    ]

    def effect_probe(self, host: Host, task: Task) -> int:
        return len(_session_meta(host, task).get("configured", []))


class TestResetAgentContext(KanbanKind):
    kind = "reset_agent_context"

    def effect_probe(self, host: Host, task: Task) -> int:
        return len(_session_meta(host, task).get("context_resets", []))


def test_the_builtin_suites_cover_both_plugins() -> None:
    """The representative set spans both shipped plugins and both owners."""
    suites = [
        TestClearDecisions,
        TestQueueRunForEachParticipant,
        TestQueueRun,
        TestRunCodeReview,
        TestEnsureParticipantSeat,
        TestSetSessionMode,
        TestEnablePlanMode,
        TestConfigureSession,
        TestResetAgentContext,
    ]
    owners = {
        (s.plugin_name, k.owner)
        for s in suites
        for k in (office_plugin.kinds.declarations() + kanban_plugin.kinds.KINDS)
        if k.name == s.kind
    }
    assert owners == {("office", "durable"), ("kanban", "session")}
