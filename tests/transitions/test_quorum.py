"""wait_for_quorum (kandev-domain 5.2): every threshold, the fail-closed empty slate, per-task
seats over template seats, re-evaluation after a decision with a compare-and-set, and what
happens with Office switched off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.errors import LanewayError
from core.model import Decision, Participant
from office_plugin.quorum import Quorum, judge, slate, validate
from tests.conftest import open_host


def seat(
    i: int, role: str = "reviewer", task: str = "", step: str = "S", agent: str = ""
) -> Participant:
    return Participant(f"p{i}", step, task, role, agent or f"a{i}", True, i)


def verdict(i: int, v: str, at: int, role: str = "reviewer") -> Decision:
    return Decision(
        f"d{at}", "T", "S", f"p{i}", v, decided_at=f"{at:04d}", decider_id=f"a{i}", role=role
    )


SEATS = [seat(1), seat(2), seat(3)]


@pytest.mark.parametrize(
    ("threshold", "verdicts", "satisfied", "reason"),
    [
        ("all_approve", ["approved", "approved", "approved"], True, ""),
        ("all_approve", ["approved", "approved", None], False, "threshold_not_met"),
        ("all_approve", ["approved", "approved", "rejected"], False, "threshold_not_met"),
        ("all_decide", ["approved", "rejected", "changes_requested"], True, ""),
        ("all_decide", ["approved", "rejected", None], False, "threshold_not_met"),
        ("majority_approve", ["approved", "approved", None], True, ""),
        ("majority_approve", ["approved", None, None], False, "threshold_not_met"),
        ("n_approve:2", ["approved", "approved", None], True, ""),
        ("n_approve:2", ["approved", "rejected", None], False, "threshold_not_met"),
        ("n_approve:4", ["approved", "approved", "approved"], False, "threshold_unsatisfiable"),
        ("any_reject", [None, "changes_requested", "approved"], True, ""),
        ("any_reject", ["rejected", None, None], True, ""),
        ("any_reject", ["approved", "approved", None], False, "threshold_not_met"),
    ],
)
def test_thresholds(
    threshold: str, verdicts: list[str | None], satisfied: bool, reason: str
) -> None:
    decisions = [verdict(i + 1, v, i) for i, v in enumerate(verdicts) if v]
    result = judge(Quorum("reviewer", threshold), SEATS, decisions)
    assert (result.satisfied, result.reason) == (satisfied, reason)


def test_latest_decision_per_seat_wins() -> None:
    decisions = [verdict(1, "rejected", 1), verdict(1, "approved", 2)]
    assert judge(Quorum("reviewer", "all_approve"), [seat(1)], decisions).satisfied
    assert not judge(Quorum("reviewer", "any_reject"), [seat(1)], decisions).satisfied


def test_empty_slate_fails_closed() -> None:
    result = judge(Quorum("reviewer", "all_approve"), [], [])
    assert (result.satisfied, result.reason) == (False, "slate_empty")


def test_slate_keeps_required_seats_of_the_role_and_prefers_per_task_seats() -> None:
    template = seat(1, agent="alice")
    own = seat(2, task="T", agent="alice")
    watcher = seat(3, role="watcher", agent="bob")
    optional = Participant("p4", "S", "", "reviewer", "carol", False, 4)
    elsewhere = seat(5, task="T", step="OTHER", agent="dave")
    got = slate([template, own, watcher, optional, elsewhere], "reviewer", "S")
    assert [s.id for s in got] == ["p2", "p5"]


@pytest.mark.parametrize(
    "config",
    [
        {"threshold": "all_approve"},
        {"role": "reviewer"},
        {"role": "reviewer", "threshold": "most"},
        {"role": "reviewer", "threshold": "n_approve:0"},
    ],
)
def test_guard_config_is_validated(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="wait_for_quorum"):
        validate(config)


def test_guard_missing_threshold_is_a_load_time_error(sqlite_url: str, tmp_path: Path) -> None:
    """The reference silently treats a guard with no threshold as no guard; we refuse it."""
    path = tmp_path / "bad.yml"
    path.write_text(
        "version: 1\ntype: kandev_workflow\nworkflows:\n  - name: G\n    steps:\n"
        "      - {name: A, position: 0, events: {on_turn_complete: [{type: move_to_next,"
        " config: {wait_for_quorum: {role: reviewer}}}]}}\n      - {name: B, position: 1}\n"
    )
    with open_host(sqlite_url) as host, pytest.raises(LanewayError, match="threshold"):
        host.workflows.import_file(path)


# -- through the host ---------------------------------------------------------------------------


def _office(host: Any) -> tuple[Any, Any, list[Any]]:
    wf = host.workflows.create_from_template("office-default")
    for name in ("worker", "r1", "r2"):
        host.profiles.add(name, command=["true"])
    host.participants.add(step="Review", role="reviewer", profile="r1", workflow=wf.id)
    host.participants.add(step="Review", role="reviewer", profile="r2", workflow=wf.id)
    task = host.tasks.create(workflow=wf.id, title="t")
    host.sessions.start(task.id, profile="worker")
    host.tasks.move(task.id, "Review")
    return wf, task, host.participants.list(step="Review", task=task.id)


def test_per_task_seat_overrides_template_seat(host: Any) -> None:
    wf, task, _seats = _office(host)
    # The task gets its own seat for r1 that needs no decision: r1 leaves the slate.
    host.participants.add(
        step="Review", role="reviewer", profile="r1", task=task.id, decision_required=False
    )
    merged = host.participants.list(step="Review", task=task.id)
    assert sorted((s.task_id != "", s.agent_profile_id) for s in merged) == sorted(
        [(True, host.profiles.get("r1").id), (False, host.profiles.get("r2").id)]
    )
    r2 = next(s for s in merged if s.agent_profile_id == host.profiles.get("r2").id)
    result = host.decisions.record(task.id, "Review", r2.id, "approved")
    assert result["transitioned"] is True
    assert host.tasks.get(task.id).workflow_step_id == wf.step("Approval").id


def test_decision_reevaluates_with_compare_and_set(host: Any) -> None:
    wf, task, seats = _office(host)
    host.decisions.record(task.id, "Review", seats[0].id, "approved")
    host.tasks.move(task.id, "Work")  # the task moves on before the last verdict
    result = host.decisions.record(task.id, "Review", seats[1].id, "approved")
    assert result["transitioned"] is False
    assert host.tasks.get(task.id).workflow_step_id == wf.step("Work").id


def test_reject_sends_the_task_back(host: Any) -> None:
    wf, task, seats = _office(host)
    result = host.decisions.record(task.id, "Review", seats[1].id, "changes_requested")
    assert (result["transitioned"], result["to_step_id"]) == (True, wf.step("Work").id)


def test_office_off_guarded_transition_does_not_fire_and_warns_once(
    host: Any, laneway_logs: list[dict[str, Any]]
) -> None:
    wf, task, seats = _office(host)
    host.set_features(office=False)
    host.decisions.record(task.id, "Review", seats[0].id, "approved")
    laneway_logs.clear()
    host.decisions.record(task.id, "Review", seats[1].id, "approved")
    assert host.tasks.get(task.id).workflow_step_id == wf.step("Review").id
    warnings = [
        r["extra"] for r in laneway_logs if r["level"] == "WARNING" and "guard" in r["extra"]
    ]
    # one evaluation stops at the first guarded move it cannot evaluate
    assert [w["guard"] for w in warnings] == ["wait_for_quorum"]
    assert warnings[0]["task_id"] == task.id
