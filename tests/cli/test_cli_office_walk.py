"""One Office Default task walked through the command line alone, as an operator would:
seats, a manual move into Review, then each reviewer's approval; the last one releases the
quorum-guarded transition to Approval."""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import Laneway


def test_office_default_task_reaches_approval_through_the_cli(laneway: Laneway) -> None:
    lw = laneway
    wf = lw.json("workflow", "create", "--template", "office-default")
    steps = {s["name"]: s["id"] for s in wf["steps"]}
    worker = lw.json("profile", "add", "worker", "--command", "agent --work")
    reviewers = [
        lw.json("profile", "add", name, "--command", "agent --review", "--role", "reviewer")
        for name in ("rev-a", "rev-b")
    ]
    assert worker["role"] == "worker"
    seats: list[dict[str, Any]] = [
        lw.json(
            "participant", "add", "--step", "review", "--role", "reviewer",
            "--profile", profile["name"], "--workflow", "Office Default",
        )
        for profile in reviewers
    ]  # fmt: skip
    assert [s["agent_profile_id"] for s in seats] == [r["id"] for r in reviewers]

    task = lw.json("task", "create", "--workflow", "office default", "--title", "Git sync")
    assert task["workflow_step_id"] == steps["Work"]
    moved = lw.json("task", "move", task["id"], "Review")
    assert moved["workflow_step_id"] == steps["Review"]

    # Review's entry fanned out one run per reviewer seat.
    runs = lw.json("runs", "list", "--task", task["id"])
    assert sorted(r["agent_profile_id"] for r in runs) == sorted(r["id"] for r in reviewers)
    assert {r["workflow_step_id"] for r in runs} == {steps["Review"]}
    (entry,) = lw.json("entries", "list", "--task", task["id"])
    assert (entry["step_id"], entry["entry_path"], entry["entry_seq"]) == (
        steps["Review"],
        "E2",
        1,
    )

    first, second = (
        lw.json(
            "decision", "record", "--task", task["id"], "--step", "review",
            "--participant", seat["id"], "--verdict", "approved",
        )
        for seat in seats
    )  # fmt: skip
    assert first["decision"]["decision"] == "approved"
    assert first["transitioned"] is False  # one of two reviewers: no quorum yet
    assert first["to_step_id"] is None
    assert second["transitioned"] is True
    assert second["to_step_id"] == steps["Approval"]

    shown = lw.json("task", "show", task["id"])
    assert shown["workflow_step_id"] == steps["Approval"]
    approval_entries = [
        e
        for e in lw.json("entries", "list", "--task", task["id"])
        if e["step_id"] == steps["Approval"]
    ]
    assert [(e["entry_path"], e["entry_seq"]) for e in approval_entries] == [("E1", 1)]


def test_office_default_loop_with_a_rejection_round_reaches_done(laneway: Laneway) -> None:
    """The whole Office Default loop, by CLI only: Work -> Review -> (reject) -> Work -> Review
    -> (approve) -> Approval -> Done. Each Review entry clears decisions and fans out afresh
    (entry_seq 1 then 2), and reaching the terminal step completes the task."""
    lw = laneway
    wf = lw.json("workflow", "create", "--template", "office-default")
    steps = {s["name"]: s["id"] for s in wf["steps"]}
    lw.json("profile", "add", "worker", "--command", "agent --work")
    for name in ("rev-a", "rev-b", "boss"):
        lw.json("profile", "add", name, "--command", "agent --decide")

    def seat(step: str, role: str, profile: str) -> str:
        made = lw.json(
            "participant", "add", "--step", step, "--role", role, "--profile", profile,
            "--workflow", "Office Default",
        )  # fmt: skip
        return str(made["id"])

    rev_a, rev_b = seat("Review", "reviewer", "rev-a"), seat("Review", "reviewer", "rev-b")
    boss = seat("Approval", "approver", "boss")
    task = lw.json("task", "create", "--workflow", "Office Default", "--title", "Git sync")
    tid = task["id"]
    lw.json("session", "start", tid, "--profile", "worker")

    def decide(step: str, participant: str, verdict: str) -> dict[str, Any]:
        args = ["--task", tid, "--step", step, "--participant", participant, "--verdict", verdict]
        return dict(lw.json("decision", "record", *args))

    done_work = lw.json("turn", "complete", tid)
    assert (done_work["transitioned"], done_work["to_step_id"]) == (True, steps["Review"])
    rejected = decide("Review", rev_a, "rejected")
    assert (rejected["transitioned"], rejected["to_step_id"]) == (True, steps["Work"])

    again = lw.json("turn", "complete", tid)
    assert again["to_step_id"] == steps["Review"]
    assert decide("Review", rev_a, "approved")["transitioned"] is False  # rev-b still to vote
    assert decide("Review", rev_b, "approved")["to_step_id"] == steps["Approval"]
    finished = decide("Approval", boss, "approved")
    assert finished["to_step_id"] == steps["Done"]

    shown = lw.json("task", "show", tid)
    assert (shown["workflow_step_id"], shown["state"]) == (steps["Done"], "COMPLETED")
    review_entries = [
        (e["entry_seq"], e["terminal"])
        for e in lw.json("entries", "list", "--task", tid)
        if e["step_id"] == steps["Review"]
    ]
    assert review_entries == [(1, True), (2, True)]
    review_runs = [
        r for r in lw.json("runs", "list", "--task", tid) if r["reason"] == "review_started"
    ]
    assert len(review_runs) == 4  # two reviewers, two rounds: the second round is not suppressed
